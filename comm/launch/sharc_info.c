/*
 * sharc-info: prints the version, the tunables with their current values
 * (SHARC_* environment variables), and the status codes.
 */
#include <stdio.h>
#include <string.h>

#include "core.h"

int main(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    printf("usage: sharc-info\nPrints sharc's version and every tunable "
           "(environment variable, current value, default, meaning).\n");
    return 0;
  }
  printf("sharc %s\n\n", sharc_version());
  printf("%-22s %-12s %-10s %s\n", "variable", "value", "default", "meaning");
  for (int i = 0; i < PARAM_COUNT; i++)
    printf("%-22s %-12s %-10s %s\n", param_env_name((param_id_t)i),
           param_str((param_id_t)i), param_default((param_id_t)i),
           param_help((param_id_t)i));
  printf("\nstatus codes:\n");
  for (int s = 0; s >= SHARC_ERR_INTERNAL; s--)
    printf("  %4d %-22s %s\n", s, sharc_status_name((sharc_status_t)s),
           sharc_status_string((sharc_status_t)s));
  return 0;
}
