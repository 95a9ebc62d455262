/* The settings of the stand-in driver libraries (fake_nvml.c, fake_cuda.c):
 * a variable of comma-separated KEY=VALUE for every device, or I.KEY=VALUE
 * for device I, which wins over the former. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The setting KEY of `variable` for device `dev` (-1: the system), else
 * `fallback`. */
static inline long long fake_setting(const char* variable, int dev, const char* key,
                                     long long fallback) {
  const char* env = getenv(variable);
  if (env == NULL) return fallback;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", env);
  long long value = fallback;
  char* save = NULL;
  for (char* item = strtok_r(buf, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
    char* eq = strchr(item, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    const char* name = item;
    int only = -1;
    char* dot = strchr(item, '.');
    if (dot != NULL) {
      *dot = '\0';
      only = atoi(item);
      name = dot + 1;
    }
    if (strcmp(name, key) != 0) continue;
    if (only < 0 || only == dev) value = atoll(eq + 1);
    if (only == dev) break; /* a device's own setting wins */
  }
  return value;
}
