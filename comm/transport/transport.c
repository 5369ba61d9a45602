/*
 * transport.c - what the transports share beyond their interface: the
 * header hook of fault injection (transport.h).
 */
#include "transport.h"

_Atomic(transport_header_hook_t) transport_header_hook;
