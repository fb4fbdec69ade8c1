/* CCrypto: OpenSSL's libcrypto, for the project's one SHA-256.
 *
 * Foundation on Linux has no CryptoKit, and a hand-written digest is slow in debug builds (the
 * pure-Swift one this replaces took 98 s for 200 MiB unoptimised; libcrypto's assembly runs at
 * disk speed in any build). EVP is used rather than the deprecated SHA256_* calls, which OpenSSL 3
 * marks deprecated. The helpers exist because EVP_DigestInit_ex takes an engine pointer and
 * EVP_DigestFinal_ex an out-length Swift would otherwise have to check at every call site.
 *
 * Only Sources/ResumableDownloads/SHA256.swift includes this module.
 */
#ifndef CCRYPTO_SHIM_H
#define CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <stddef.h>

/* The digest length in bytes (SHA256_DIGEST_LENGTH lives in the deprecated sha.h). */
static const int CCRYPTO_SHA256_LENGTH = 32;

/* Creates a SHA-256 digest context; NULL on allocation failure. Free with ccrypto_sha256_free. */
static inline EVP_MD_CTX *ccrypto_sha256_new(void) {
    EVP_MD_CTX *context = EVP_MD_CTX_new();
    if (context == NULL) return NULL;
    if (EVP_DigestInit_ex(context, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(context);
        return NULL;
    }
    return context;
}

/* Copies a context mid-stream (a digest of the prefix hashed so far without ending the stream);
 * NULL on allocation failure. */
static inline EVP_MD_CTX *ccrypto_sha256_copy(const EVP_MD_CTX *context) {
    EVP_MD_CTX *copy = EVP_MD_CTX_new();
    if (copy == NULL) return NULL;
    if (EVP_MD_CTX_copy_ex(copy, context) != 1) {
        EVP_MD_CTX_free(copy);
        return NULL;
    }
    return copy;
}

/* Feeds bytes; returns 1 on success. */
static inline int ccrypto_sha256_update(EVP_MD_CTX *context, const void *bytes, size_t count) {
    return EVP_DigestUpdate(context, bytes, count);
}

/* Writes the 32-byte digest to `digest`; returns 1 on success. The context cannot be fed again. */
static inline int ccrypto_sha256_final(EVP_MD_CTX *context, unsigned char *digest) {
    unsigned int length = 0;
    return EVP_DigestFinal_ex(context, digest, &length) == 1 && length == 32;
}

static inline void ccrypto_sha256_free(EVP_MD_CTX *context) {
    EVP_MD_CTX_free(context);
}

#endif
