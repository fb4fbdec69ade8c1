/* dlopen_table.h: the one loader behind CCurl's, CCrypto's and CSystemdBus's tables of function
 * pointers.
 *
 * Each of those targets loads its library on first use (dlopen) instead of linking it, so that a
 * command which never needs libcurl, libcrypto or libsystemd does not map them and their
 * dependencies (the reasons and figures are in each shim.h). A target lists the functions it uses
 * once, as rows of an X-macro:
 *
 *     #define CFOO_FUNCTIONS(ROW) \
 *         ROW(int, open, foo_open, (const char *name)) \
 *         ROW(void, close, foo_close, (foo *handle))
 *     DLOPEN_TABLE(cfoo_api, cfoo_load, "libfoo.so.1", CFOO_FUNCTIONS)
 *
 * which declares `cfoo_api` (one function pointer per row, named by the row's field) and
 * `const char *cfoo_load(cfoo_api *api)`: it opens the library for the process's life and fills
 * every field, returning NULL on success, else a message (dlerror's text, valid until the next
 * dl* call on this thread, or the first symbol the library lacks). Not thread-safe: the Swift
 * side calls it once, from a lazy static. The table and the loader read the same rows, so a
 * function cannot be declared and left unresolved.
 *
 * Only macros here: each C target that includes this header is its own Clang module, and a
 * function defined in several of them would clash in a Swift file importing two (CCurl, CCrypto).
 * Lives beside CLinuxSystem, the C side of the project's system calls, which itself loads nothing.
 */
#ifndef DLOPEN_TABLE_H
#define DLOPEN_TABLE_H
#include <dlfcn.h>
#include <stddef.h>

/* One row as a struct field: a pointer to the function. */
#define DLOPEN_TABLE_FIELD(result, field, symbol, parameters) result (*field) parameters;

/* One row as a lookup: the symbol's address into the field, or the loader returns its name. */
#define DLOPEN_TABLE_RESOLVE(result, field, symbol, parameters) \
    *(void **)(&api->field) = dlsym(library, #symbol); \
    if (api->field == NULL) return "it has no " #symbol;

/* The table type `api_type` and its loader `load` for the library `soname` (see above). */
#define DLOPEN_TABLE(api_type, load, soname, ROWS) \
    typedef struct api_type { ROWS(DLOPEN_TABLE_FIELD) } api_type; \
    static inline const char *load(api_type *api) { \
        void *library = dlopen((soname), RTLD_NOW | RTLD_LOCAL); \
        if (library == NULL) return dlerror(); \
        ROWS(DLOPEN_TABLE_RESOLVE) \
        return NULL; \
    }

#endif
