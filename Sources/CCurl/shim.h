/* CCurl: libcurl for ResumableDownloads (SHA-256 lives in CCrypto).
 *
 * Swift cannot call C variadic functions, and curl_easy_setopt / curl_easy_getinfo /
 * curl_multi_setopt are variadic macros over variadic functions. Each helper below fixes one
 * argument type so the Swift side gets a typed, non-variadic call. Macros Swift cannot import
 * (expressions rather than literals) are re-exported as constants.
 *
 * Only Sources/ResumableDownloads/Curl.swift includes this module.
 */
#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
#include <curl/curl.h>
#include <sys/types.h>

/* --- constants Swift cannot import (macros that are expressions) --- */

/* CURLPAUSE_CONT is (CURLPAUSE_RECV_CONT|CURLPAUSE_SEND_CONT). */
static const int CCURL_PAUSE_CONT = CURLPAUSE_CONT;
/* CURL_GLOBAL_DEFAULT is CURL_GLOBAL_ALL, itself an OR of flags. */
static const long CCURL_GLOBAL_DEFAULT = CURL_GLOBAL_DEFAULT;
/* Returned from a write callback to pause the transfer; libcurl keeps the chunk and
 * delivers it again after curl_easy_pause(CURLPAUSE_CONT). */
static const size_t CCURL_WRITEFUNC_PAUSE = CURL_WRITEFUNC_PAUSE;

/* --- callback signatures, named so Swift sees one function type each --- */

/* CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION share this shape. */
typedef size_t (*ccurl_data_callback)(char *buffer, size_t size, size_t count, void *userdata);
/* CURLOPT_XFERINFOFUNCTION. */
typedef int (*ccurl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);

/* --- curl_easy_setopt, one helper per argument type --- */

/* Options taking a long (flags, counts, seconds). */
static inline CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

/* Options taking a C string; libcurl copies it (since 7.17), so Swift temporaries are fine. */
static inline CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

/* Options taking an opaque pointer (userdata, curl_slist). */
static inline CURLcode ccurl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

/* Options taking a curl_off_t (large offsets and sizes). */
static inline CURLcode ccurl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

/* CURLOPT_WRITEFUNCTION / CURLOPT_HEADERFUNCTION. */
static inline CURLcode ccurl_easy_setopt_data_callback(CURL *handle, CURLoption option,
                                                       ccurl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}

/* CURLOPT_XFERINFOFUNCTION. */
static inline CURLcode ccurl_easy_setopt_xferinfo_callback(CURL *handle, ccurl_xferinfo_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}

/* --- curl_easy_getinfo, one helper per result type --- */

static inline CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode ccurl_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}

/* The returned string belongs to the handle; copy it before the handle is cleaned up. */
static inline CURLcode ccurl_easy_getinfo_string(CURL *handle, CURLINFO info, const char **value) {
    return curl_easy_getinfo(handle, info, value);
}

/* --- curl_multi_setopt --- */

static inline CURLMcode ccurl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}

/* --- CURLMsg: the union member Swift sees awkwardly --- */

/* Reads the CURLcode of a CURLMSG_DONE message (msg->data.result). */
static inline CURLcode ccurl_message_result(const CURLMsg *message) {
    return message->data.result;
}

#endif
