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
#include "../CLinuxSystem/dlopen_table.h"
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

/* libsystemd's soname: 0 since systemd 209 (libsystemd0 on Debian and Ubuntu). */
#define CSDBUS_LIBRARY "libsystemd.so.0"

/* The sd-bus functions used, one row each: `csdbus_api` and `csdbus_load` (dlopen_table.h). */
#define CSDBUS_FUNCTIONS(ROW) \
    ROW(int, bus_new, sd_bus_new, (sd_bus **ret)) \
    ROW(int, bus_set_address, sd_bus_set_address, (sd_bus *bus, const char *address)) \
    ROW(int, bus_set_bus_client, sd_bus_set_bus_client, (sd_bus *bus, int b)) \
    ROW(int, bus_set_description, sd_bus_set_description, (sd_bus *bus, const char *description)) \
    ROW(int, bus_negotiate_fds, sd_bus_negotiate_fds, (sd_bus *bus, int b)) \
    ROW(int, bus_start, sd_bus_start, (sd_bus *bus)) \
    ROW(sd_bus *, bus_flush_close_unref, sd_bus_flush_close_unref, (sd_bus *bus)) \
    ROW(int, bus_is_open, sd_bus_is_open, (sd_bus *bus)) \
    ROW(int, bus_get_fd, sd_bus_get_fd, (sd_bus *bus)) \
    ROW(int, bus_get_events, sd_bus_get_events, (sd_bus *bus)) \
    ROW(int, bus_get_timeout, sd_bus_get_timeout, (sd_bus *bus, uint64_t *timeout_usec)) \
    ROW(int, bus_process, sd_bus_process, (sd_bus *bus, sd_bus_message **r)) \
    ROW(int, bus_call_async, sd_bus_call_async, (sd_bus *bus, sd_bus_slot **slot, sd_bus_message *m, \
        sd_bus_message_handler_t callback, void *userdata, uint64_t usec)) \
    ROW(int, bus_add_match_async, sd_bus_add_match_async, (sd_bus *bus, sd_bus_slot **slot, \
        const char *match, sd_bus_message_handler_t callback, \
        sd_bus_message_handler_t install_callback, void *userdata)) /* systemd >= 237 */ \
    ROW(int, message_new_method_call, sd_bus_message_new_method_call, (sd_bus *bus, sd_bus_message **m, \
        const char *destination, const char *path, const char *interface, const char *member)) \
    ROW(sd_bus_message *, message_unref, sd_bus_message_unref, (sd_bus_message *m)) \
    ROW(int, message_set_auto_start, sd_bus_message_set_auto_start, (sd_bus_message *m, int b)) \
    ROW(int, message_get_type, sd_bus_message_get_type, (sd_bus_message *m, uint8_t *type)) \
    ROW(int, message_get_cookie, sd_bus_message_get_cookie, (sd_bus_message *m, uint64_t *cookie)) \
    ROW(int, message_get_reply_cookie, sd_bus_message_get_reply_cookie, (sd_bus_message *m, \
        uint64_t *cookie)) \
    ROW(const char *, message_get_signature, sd_bus_message_get_signature, (sd_bus_message *m, \
        int complete)) \
    ROW(const char *, message_get_path, sd_bus_message_get_path, (sd_bus_message *m)) \
    ROW(const char *, message_get_interface, sd_bus_message_get_interface, (sd_bus_message *m)) \
    ROW(const char *, message_get_member, sd_bus_message_get_member, (sd_bus_message *m)) \
    ROW(const char *, message_get_sender, sd_bus_message_get_sender, (sd_bus_message *m)) \
    ROW(const sd_bus_error *, message_get_error, sd_bus_message_get_error, (sd_bus_message *m)) \
    ROW(int, message_append_basic, sd_bus_message_append_basic, (sd_bus_message *m, char type, \
        const void *p)) \
    ROW(int, message_read_basic, sd_bus_message_read_basic, (sd_bus_message *m, char type, void *p)) \
    ROW(int, message_skip, sd_bus_message_skip, (sd_bus_message *m, const char *types)) \
    ROW(int, message_enter_container, sd_bus_message_enter_container, (sd_bus_message *m, char type, \
        const char *contents)) \
    ROW(int, message_exit_container, sd_bus_message_exit_container, (sd_bus_message *m)) \
    ROW(int, message_peek_type, sd_bus_message_peek_type, (sd_bus_message *m, char *type, \
        const char **contents))
DLOPEN_TABLE(csdbus_api, csdbus_load, CSDBUS_LIBRARY, CSDBUS_FUNCTIONS)

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
