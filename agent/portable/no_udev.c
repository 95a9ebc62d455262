// libudev for the static hwloc of the portable agent: hwloc asks udev only
// for the names of OS devices (disks, network interfaces), which the agent
// never uses; Debian ships no static libudev, and nodes without systemd have
// no libudev at all. Each call answers "no udev", which hwloc takes as such.
#include <stddef.h>

struct udev;
struct udev_device;

struct udev* udev_new(void) {
  return NULL;
}
struct udev* udev_unref(struct udev* u) {
  (void)u;
  return NULL;
}
struct udev_device* udev_device_new_from_subsystem_sysname(struct udev* u, const char* subsystem,
                                                           const char* sysname) {
  (void)u;
  (void)subsystem;
  (void)sysname;
  return NULL;
}
struct udev_device* udev_device_unref(struct udev_device* d) {
  (void)d;
  return NULL;
}
const char* udev_device_get_property_value(struct udev_device* d, const char* key) {
  (void)d;
  (void)key;
  return NULL;
}
