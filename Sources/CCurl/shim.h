/* CCurl: libcurl and libcrypto (SHA-256). Helpers are added with the download engine. */
#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
#include <curl/curl.h>
#include <openssl/evp.h>
#endif
