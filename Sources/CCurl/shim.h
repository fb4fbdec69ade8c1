/* CCurl: libcurl for ResumableDownloads (SHA-256 lives in CCrypto).
 *
 * libcurl is loaded on first use (dlopen), not linked. A linked libcurl maps some thirty
 * libraries (TLS, Kerberos, LDAP, SSH, IDN, PSL, brotli...) into every process that links
 * ResumableDownloads, and relocating them is most of the page faults and several MB of resident
 * memory of `reachability status` and `watch`, which never download. ccurl_load fills a table
 * of function pointers once (Sources/CLinuxSystem/dlopen_table.h); every call goes through it.
 *
 * Swift cannot call C variadic functions, and curl_easy_setopt / curl_easy_getinfo /
 * curl_multi_setopt are variadic. Each helper below fixes one argument type so the Swift side
 * gets a typed, non-variadic call. Macros Swift cannot import (expressions rather than
 * literals) are re-exported as constants.
 *
 * Only Sources/ResumableDownloads/Engine/Curl.swift includes this module.
 */
#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
#include <curl/curl.h>
#include "../CLinuxSystem/dlopen_table.h"
#include <stddef.h>
#include <sys/types.h>

/* --- the libcurl functions used, resolved from the shared library --- */

/* libcurl's soname: 4 since 2006 (libcurl4 on Debian and Ubuntu). */
#define CCURL_LIBRARY "libcurl.so.4"

/* The libcurl functions used, one row each: `ccurl_api` and `ccurl_load` (dlopen_table.h). */
#define CCURL_FUNCTIONS(ROW) \
    ROW(CURLcode, global_init, curl_global_init, (long flags)) \
    ROW(char *, version, curl_version, (void)) \
    ROW(CURL *, easy_init, curl_easy_init, (void)) \
    ROW(CURLcode, easy_setopt, curl_easy_setopt, (CURL *handle, CURLoption option, ...)) \
    ROW(CURLcode, easy_getinfo, curl_easy_getinfo, (CURL *handle, CURLINFO info, ...)) \
    ROW(CURLcode, easy_pause, curl_easy_pause, (CURL *handle, int bitmask)) \
    ROW(void, easy_cleanup, curl_easy_cleanup, (CURL *handle)) \
    ROW(const char *, easy_strerror, curl_easy_strerror, (CURLcode code)) \
    ROW(struct curl_slist *, slist_append, curl_slist_append, (struct curl_slist *list, const char *text)) \
    ROW(void, slist_free_all, curl_slist_free_all, (struct curl_slist *list)) \
    ROW(CURLM *, multi_init, curl_multi_init, (void)) \
    ROW(CURLMcode, multi_setopt, curl_multi_setopt, (CURLM *multi, CURLMoption option, ...)) \
    ROW(CURLMcode, multi_add_handle, curl_multi_add_handle, (CURLM *multi, CURL *handle)) \
    ROW(CURLMcode, multi_remove_handle, curl_multi_remove_handle, (CURLM *multi, CURL *handle)) \
    ROW(CURLMcode, multi_perform, curl_multi_perform, (CURLM *multi, int *running)) \
    ROW(CURLMcode, multi_timeout, curl_multi_timeout, (CURLM *multi, long *milliseconds)) \
    ROW(CURLMcode, multi_poll, curl_multi_poll, (CURLM *multi, struct curl_waitfd extra[], \
        unsigned int count, int timeout_ms, int *ready)) /* libcurl >= 7.66 */ \
    ROW(CURLMcode, multi_wakeup, curl_multi_wakeup, (CURLM *multi)) /* libcurl >= 7.68 */ \
    ROW(CURLMsg *, multi_info_read, curl_multi_info_read, (CURLM *multi, int *queued)) \
    ROW(CURLMcode, multi_cleanup, curl_multi_cleanup, (CURLM *multi))
DLOPEN_TABLE(ccurl_api, ccurl_load, CCURL_LIBRARY, CCURL_FUNCTIONS)

/* --- constants Swift cannot import (macros that are expressions) --- */

/* CURLPAUSE_CONT is (CURLPAUSE_RECV_CONT|CURLPAUSE_SEND_CONT). */
static const int CCURL_PAUSE_CONT = CURLPAUSE_CONT;
/* CURL_GLOBAL_DEFAULT is CURL_GLOBAL_ALL, itself an OR of flags. */
static const long CCURL_GLOBAL_DEFAULT = CURL_GLOBAL_DEFAULT;
/* Returned from a write callback to pause the transfer; libcurl keeps the chunk and
 * delivers it again after curl_easy_pause(CURLPAUSE_CONT). */
static const size_t CCURL_WRITEFUNC_PAUSE = CURL_WRITEFUNC_PAUSE;
/* Returned from a read callback (a request body) to end the transfer with
 * CURLE_ABORTED_BY_CALLBACK: the file being sent failed or changed. */
static const size_t CCURL_READFUNC_ABORT = CURL_READFUNC_ABORT;

/* --- callback signatures, named so Swift sees one function type each --- */

/* CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION share this shape. */
typedef size_t (*ccurl_data_callback)(char *buffer, size_t size, size_t count, void *userdata);
/* CURLOPT_READFUNCTION: fills `buffer` with up to size * count bytes of the request body. */
typedef size_t (*ccurl_read_callback)(char *buffer, size_t size, size_t count, void *userdata);
/* CURLOPT_XFERINFOFUNCTION. */
typedef int (*ccurl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);

/* --- curl_easy_setopt, one helper per argument type --- */

/* Options taking a long (flags, counts, seconds). */
static inline CURLcode ccurl_easy_setopt_long(const ccurl_api *api, CURL *handle, CURLoption option, long value) {
    return api->easy_setopt(handle, option, value);
}

/* Options taking a C string; libcurl copies it (since 7.17), so Swift temporaries are fine. */
static inline CURLcode ccurl_easy_setopt_string(const ccurl_api *api, CURL *handle, CURLoption option,
                                                const char *value) {
    return api->easy_setopt(handle, option, value);
}

/* Options taking an opaque pointer (userdata, curl_slist). */
static inline CURLcode ccurl_easy_setopt_pointer(const ccurl_api *api, CURL *handle, CURLoption option,
                                                 void *value) {
    return api->easy_setopt(handle, option, value);
}

/* Options taking a curl_off_t (large offsets and sizes). */
static inline CURLcode ccurl_easy_setopt_off_t(const ccurl_api *api, CURL *handle, CURLoption option,
                                               curl_off_t value) {
    return api->easy_setopt(handle, option, value);
}

/* CURLOPT_WRITEFUNCTION / CURLOPT_HEADERFUNCTION. */
static inline CURLcode ccurl_easy_setopt_data_callback(const ccurl_api *api, CURL *handle, CURLoption option,
                                                       ccurl_data_callback callback) {
    return api->easy_setopt(handle, option, callback);
}

/* CURLOPT_READFUNCTION (a request body sent from a file or from memory). */
static inline CURLcode ccurl_easy_setopt_read_callback(const ccurl_api *api, CURL *handle,
                                                       ccurl_read_callback callback) {
    return api->easy_setopt(handle, CURLOPT_READFUNCTION, callback);
}

/* CURLOPT_XFERINFOFUNCTION. */
static inline CURLcode ccurl_easy_setopt_xferinfo_callback(const ccurl_api *api, CURL *handle,
                                                           ccurl_xferinfo_callback callback) {
    return api->easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}

/* CURLOPT_SOCKOPTFUNCTION: called with each socket libcurl makes for a connection, before it
 * connects (options such as SO_RCVBUF set here shape the TCP handshake's window scale); returns
 * CURL_SOCKOPT_OK. CURLINFO_ACTIVESOCKET cannot stand in: it answers only once a transfer is done. */
typedef int (*ccurl_sockopt_callback)(void *userdata, curl_socket_t socket, curlsocktype purpose);

static inline CURLcode ccurl_easy_setopt_sockopt_callback(const ccurl_api *api, CURL *handle,
                                                          ccurl_sockopt_callback callback) {
    return api->easy_setopt(handle, CURLOPT_SOCKOPTFUNCTION, callback);
}

/* --- curl_easy_getinfo, one helper per result type --- */

static inline CURLcode ccurl_easy_getinfo_long(const ccurl_api *api, CURL *handle, CURLINFO info, long *value) {
    return api->easy_getinfo(handle, info, value);
}

static inline CURLcode ccurl_easy_getinfo_off_t(const ccurl_api *api, CURL *handle, CURLINFO info,
                                                curl_off_t *value) {
    return api->easy_getinfo(handle, info, value);
}

/* The returned string belongs to the handle; copy it before the handle is cleaned up. */
static inline CURLcode ccurl_easy_getinfo_string(const ccurl_api *api, CURL *handle, CURLINFO info,
                                                 const char **value) {
    return api->easy_getinfo(handle, info, value);
}

/* CURLINFO_ACTIVESOCKET: the connection's socket, CURL_SOCKET_BAD when there is none. */
static inline CURLcode ccurl_easy_getinfo_socket(const ccurl_api *api, CURL *handle, curl_socket_t *value) {
    return api->easy_getinfo(handle, CURLINFO_ACTIVESOCKET, value);
}

/* --- curl_multi_setopt --- */

static inline CURLMcode ccurl_multi_setopt_long(const ccurl_api *api, CURLM *multi, CURLMoption option, long value) {
    return api->multi_setopt(multi, option, value);
}

/* --- CURLMsg: the union member Swift sees awkwardly --- */

/* Reads the CURLcode of a CURLMSG_DONE message (msg->data.result). */
static inline CURLcode ccurl_message_result(const CURLMsg *message) {
    return message->data.result;
}

#endif
