/*
 * comm.h - the communicator as the API layer sees it: its state
 * (state.h) with the transports that carry it (transport.h).
 */
#ifndef SHARC_COMM_H
#define SHARC_COMM_H

#include "state.h"
#include "transport.h"

/* Reads the tunables into cfg; SHARC_ERR_INVALID_ARG names a bad value. */
sharc_status_t comm_cfg_load(comm_cfg_t *cfg);

#endif /* SHARC_COMM_H */
