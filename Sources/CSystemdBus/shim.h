/* CSystemdBus: libsystemd's sd-bus, the D-Bus client LinuxReachability uses to read what
 * NetworkManager and ModemManager know (metered links, device types, connectivity, roaming).
 *
 * libsystemd is loaded on first use (dlopen), not linked. A linked libsystemd.so.0 maps
 * libgcrypt, liblzma, libzstd, liblz4, libcap and libgpg-error into every process, about a
 * megabyte of resident memory and a few hundred microseconds of relocation for each command,
 * while a container or server without a system bus never talks D-Bus at all. The monitor looks
 * for the bus first and calls csdbus_load only when there is one to talk to; every call then
 * goes through the table below.
 *
 * Only non-variadic sd-bus calls are used (Swift cannot call C variadic functions):
 * sd_bus_message_append_basic / read_basic instead of sd_bus_message_append / read, and
 * sd_bus_message_new_method_call + sd_bus_call_async instead of sd_bus_call_method_async.
 *
 * Only Sources/LinuxReachability/SystemBus/SystemBusConnection.swift includes this module.
 */
#ifndef CSYSTEMDBUS_SHIM_H
#define CSYSTEMDBUS_SHIM_H
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

/* libsystemd's soname: 0 since systemd 209 (libsystemd0 on Debian and Ubuntu). */
#define CSDBUS_LIBRARY "libsystemd.so.0"

typedef struct csdbus_api {
    int (*bus_new)(sd_bus **ret);
    int (*bus_set_address)(sd_bus *bus, const char *address);
    int (*bus_set_bus_client)(sd_bus *bus, int b);
    int (*bus_set_description)(sd_bus *bus, const char *description);
    int (*bus_negotiate_fds)(sd_bus *bus, int b);
    int (*bus_start)(sd_bus *bus);
    sd_bus *(*bus_flush_close_unref)(sd_bus *bus);
    int (*bus_is_open)(sd_bus *bus);
    int (*bus_get_fd)(sd_bus *bus);
    int (*bus_get_events)(sd_bus *bus);
    int (*bus_get_timeout)(sd_bus *bus, uint64_t *timeout_usec);
    int (*bus_process)(sd_bus *bus, sd_bus_message **r);
    int (*bus_call_async)(sd_bus *bus, sd_bus_slot **slot, sd_bus_message *m,
                          sd_bus_message_handler_t callback, void *userdata, uint64_t usec);
    int (*bus_add_match_async)(sd_bus *bus, sd_bus_slot **slot, const char *match,
                               sd_bus_message_handler_t callback, sd_bus_message_handler_t install_callback,
                               void *userdata);
    int (*message_new_method_call)(sd_bus *bus, sd_bus_message **m, const char *destination,
                                   const char *path, const char *interface, const char *member);
    sd_bus_message *(*message_unref)(sd_bus_message *m);
    int (*message_set_auto_start)(sd_bus_message *m, int b);
    int (*message_get_type)(sd_bus_message *m, uint8_t *type);
    int (*message_get_cookie)(sd_bus_message *m, uint64_t *cookie);
    int (*message_get_reply_cookie)(sd_bus_message *m, uint64_t *cookie);
    const char *(*message_get_signature)(sd_bus_message *m, int complete);
    const char *(*message_get_path)(sd_bus_message *m);
    const char *(*message_get_interface)(sd_bus_message *m);
    const char *(*message_get_member)(sd_bus_message *m);
    const char *(*message_get_sender)(sd_bus_message *m);
    const sd_bus_error *(*message_get_error)(sd_bus_message *m);
    int (*message_append_basic)(sd_bus_message *m, char type, const void *p);
    int (*message_read_basic)(sd_bus_message *m, char type, void *p);
    int (*message_skip)(sd_bus_message *m, const char *types);
    int (*message_enter_container)(sd_bus_message *m, char type, const char *contents);
    int (*message_exit_container)(sd_bus_message *m);
    int (*message_peek_type)(sd_bus_message *m, char *type, const char **contents);
} csdbus_api;

/* Loads libsystemd and fills `api`. Returns NULL on success, else a message (dlerror's text,
 * valid until the next dl* call on this thread). The library stays loaded for the process's
 * life. Not thread-safe: call once (SystemBusConnection.swift keeps the table in a lazy static). */
static inline const char *csdbus_load(csdbus_api *api) {
    void *library = dlopen(CSDBUS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) return dlerror();
#define CSDBUS_RESOLVE(field, symbol) \
    do { \
        *(void **)(&api->field) = dlsym(library, #symbol); \
        if (api->field == NULL) return "libsystemd lacks " #symbol; \
    } while (0)
    CSDBUS_RESOLVE(bus_new, sd_bus_new);
    CSDBUS_RESOLVE(bus_set_address, sd_bus_set_address);
    CSDBUS_RESOLVE(bus_set_bus_client, sd_bus_set_bus_client);
    CSDBUS_RESOLVE(bus_set_description, sd_bus_set_description);
    CSDBUS_RESOLVE(bus_negotiate_fds, sd_bus_negotiate_fds);
    CSDBUS_RESOLVE(bus_start, sd_bus_start);
    CSDBUS_RESOLVE(bus_flush_close_unref, sd_bus_flush_close_unref);
    CSDBUS_RESOLVE(bus_is_open, sd_bus_is_open);
    CSDBUS_RESOLVE(bus_get_fd, sd_bus_get_fd);
    CSDBUS_RESOLVE(bus_get_events, sd_bus_get_events);
    CSDBUS_RESOLVE(bus_get_timeout, sd_bus_get_timeout);
    CSDBUS_RESOLVE(bus_process, sd_bus_process);
    CSDBUS_RESOLVE(bus_call_async, sd_bus_call_async);
    CSDBUS_RESOLVE(bus_add_match_async, sd_bus_add_match_async);   /* systemd >= 237 */
    CSDBUS_RESOLVE(message_new_method_call, sd_bus_message_new_method_call);
    CSDBUS_RESOLVE(message_unref, sd_bus_message_unref);
    CSDBUS_RESOLVE(message_set_auto_start, sd_bus_message_set_auto_start);
    CSDBUS_RESOLVE(message_get_type, sd_bus_message_get_type);
    CSDBUS_RESOLVE(message_get_cookie, sd_bus_message_get_cookie);
    CSDBUS_RESOLVE(message_get_reply_cookie, sd_bus_message_get_reply_cookie);
    CSDBUS_RESOLVE(message_get_signature, sd_bus_message_get_signature);
    CSDBUS_RESOLVE(message_get_path, sd_bus_message_get_path);
    CSDBUS_RESOLVE(message_get_interface, sd_bus_message_get_interface);
    CSDBUS_RESOLVE(message_get_member, sd_bus_message_get_member);
    CSDBUS_RESOLVE(message_get_sender, sd_bus_message_get_sender);
    CSDBUS_RESOLVE(message_get_error, sd_bus_message_get_error);
    CSDBUS_RESOLVE(message_append_basic, sd_bus_message_append_basic);
    CSDBUS_RESOLVE(message_read_basic, sd_bus_message_read_basic);
    CSDBUS_RESOLVE(message_skip, sd_bus_message_skip);
    CSDBUS_RESOLVE(message_enter_container, sd_bus_message_enter_container);
    CSDBUS_RESOLVE(message_exit_container, sd_bus_message_exit_container);
    CSDBUS_RESOLVE(message_peek_type, sd_bus_message_peek_type);
#undef CSDBUS_RESOLVE
    return NULL;
}

/* --- constants Swift cannot import --- */

/* sd-bus message types (SD_BUS_MESSAGE_* are enum values Swift sees, but as a C enum whose
 * type varies; plain uint8_t constants compare directly with sd_bus_message_get_type). */
static const uint8_t CSDBUS_MESSAGE_METHOD_RETURN = SD_BUS_MESSAGE_METHOD_RETURN;
static const uint8_t CSDBUS_MESSAGE_METHOD_ERROR = SD_BUS_MESSAGE_METHOD_ERROR;
static const uint8_t CSDBUS_MESSAGE_SIGNAL = SD_BUS_MESSAGE_SIGNAL;

/* --- callback signature, named so Swift sees one function type --- */

/* Every reply and every matched signal arrives through one of these; userdata is the
 * connection object (see SystemBusConnection.swift for its lifetime). */
typedef int (*csdbus_message_handler)(sd_bus_message *m, void *userdata, sd_bus_error *ret_error);

#endif
