/* CCrypto: OpenSSL's libcrypto, for the project's one SHA-256.
 *
 * Foundation on Linux has no CryptoKit, and a hand-written digest is slow in debug builds (the
 * pure-Swift one this replaced took 98 s for 200 MiB unoptimised; libcrypto's assembly runs at
 * disk speed in any build). EVP is used rather than the SHA256_* calls OpenSSL 3 deprecates.
 *
 * Like libcurl (CCurl), libcrypto is loaded on first use (dlopen), not linked: relocating it
 * costs every process about 1.4 MB of resident memory, and only downloads with --sha256 hash.
 * When a download runs, libcurl has already loaded the same libcrypto, which dlopen reuses.
 *
 * Only Sources/ResumableDownloads/Storage/SHA256.swift includes this module.
 */
#ifndef CCRYPTO_SHIM_H
#define CCRYPTO_SHIM_H
#include "../CLinuxSystem/dlopen_table.h"
#include <openssl/evp.h>
#include <openssl/opensslv.h>
#include <stddef.h>

/* The digest length in bytes (SHA256_DIGEST_LENGTH lives in the deprecated sha.h). */
static const int CCRYPTO_SHA256_LENGTH = 32;

/* libcrypto's soname for the headers compiled against: libcrypto.so.3 for OpenSSL 3,
 * libcrypto.so.1.1 for 1.1. */
#define CCRYPTO_STRINGIFY2(x) #x
#define CCRYPTO_STRINGIFY(x) CCRYPTO_STRINGIFY2(x)
#if defined(OPENSSL_VERSION_MAJOR) && OPENSSL_VERSION_MAJOR >= 3
#define CCRYPTO_LIBRARY "libcrypto.so." CCRYPTO_STRINGIFY(OPENSSL_SHLIB_VERSION)
#else
#define CCRYPTO_LIBRARY "libcrypto.so." SHLIB_VERSION_NUMBER
#endif

/* CCRYPTO_LIBRARY for Swift, which cannot import a macro built by concatenation. */
static inline const char *ccrypto_library_name(void) { return CCRYPTO_LIBRARY; }

/* The libcrypto functions used, one row each: `ccrypto_api` and `ccrypto_load` (dlopen_table.h). */
#define CCRYPTO_FUNCTIONS(ROW) \
    ROW(EVP_MD_CTX *, md_ctx_new, EVP_MD_CTX_new, (void)) \
    ROW(void, md_ctx_free, EVP_MD_CTX_free, (EVP_MD_CTX *context)) \
    ROW(int, md_ctx_copy_ex, EVP_MD_CTX_copy_ex, (EVP_MD_CTX *out, const EVP_MD_CTX *in)) \
    ROW(const EVP_MD *, sha256, EVP_sha256, (void)) \
    ROW(int, digest_init_ex, EVP_DigestInit_ex, (EVP_MD_CTX *context, const EVP_MD *type, ENGINE *engine)) \
    ROW(int, digest_update, EVP_DigestUpdate, (EVP_MD_CTX *context, const void *bytes, size_t count)) \
    ROW(int, digest_final_ex, EVP_DigestFinal_ex, (EVP_MD_CTX *context, unsigned char *digest, \
        unsigned int *length))
DLOPEN_TABLE(ccrypto_api, ccrypto_load, CCRYPTO_LIBRARY, CCRYPTO_FUNCTIONS)

/* Creates a SHA-256 digest context; NULL on allocation failure. Free with ccrypto_sha256_free. */
static inline EVP_MD_CTX *ccrypto_sha256_new(const ccrypto_api *api) {
    EVP_MD_CTX *context = api->md_ctx_new();
    if (context == NULL) return NULL;
    if (api->digest_init_ex(context, api->sha256(), NULL) != 1) {
        api->md_ctx_free(context);
        return NULL;
    }
    return context;
}

/* Copies a context mid-stream (a digest of the prefix hashed so far without ending the stream);
 * NULL on allocation failure. */
static inline EVP_MD_CTX *ccrypto_sha256_copy(const ccrypto_api *api, const EVP_MD_CTX *context) {
    EVP_MD_CTX *copy = api->md_ctx_new();
    if (copy == NULL) return NULL;
    if (api->md_ctx_copy_ex(copy, context) != 1) {
        api->md_ctx_free(copy);
        return NULL;
    }
    return copy;
}

/* Feeds bytes; returns 1 on success. */
static inline int ccrypto_sha256_update(const ccrypto_api *api, EVP_MD_CTX *context, const void *bytes,
                                        size_t count) {
    return api->digest_update(context, bytes, count);
}

/* Writes the 32-byte digest to `digest`; returns 1 on success. The context cannot be fed again. */
static inline int ccrypto_sha256_final(const ccrypto_api *api, EVP_MD_CTX *context, unsigned char *digest) {
    unsigned int length = 0;
    return api->digest_final_ex(context, digest, &length) == 1 && length == 32;
}

static inline void ccrypto_sha256_free(const ccrypto_api *api, EVP_MD_CTX *context) {
    api->md_ctx_free(context);
}

#endif
