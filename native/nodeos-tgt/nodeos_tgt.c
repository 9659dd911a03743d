/*   SPDX-License-Identifier: BSD-3-Clause
 *   nodeos: SPDK's NVMe-oF target whose JSON-RPC socket is answered within
 *   --rpc-poll-us (default 100 us) instead of SPDK's fixed 4 ms poll.
 *
 *   Why (docs/spdk.md, "nodeos-tgt"): a crash-consistent snapshot of a replicated volume holds
 *   host writes for three RPC rounds (freeze, every leg's snapshot, read-and-thaw). SPDK v26.05
 *   polls its RPC socket every 4 ms (RPC_SELECT_INTERVAL in lib/init/rpc.c, compiled in, no
 *   option), so the hold cannot go below ~3 polls plus their queueing, whatever the caller does.
 *
 *   How: everything is SPDK's nvmf_tgt (same libraries, same options, same methods), plus one
 *   step once the framework runs: a second RPC server of SPDK's own (spdk_rpc_server_listen)
 *   is opened beside the first, polled by a poller of our own every --rpc-poll-us, and renamed
 *   over the -r path. New connections reach it; a connection made before (the set-up's
 *   framework_start_init, whose reply is still to be sent) stays with SPDK's server, which
 *   is not touched. In interrupt mode, or with --rpc-poll-us 0, nothing changes.
 */

#include "spdk/stdinc.h"

#include "spdk/env.h"
#include "spdk/event.h"
#include "spdk/log.h"
#include "spdk/rpc.h"
#include "spdk/string.h"
#include "spdk/thread.h"

#define RPC_POLL_US_DEFAULT 100
#define RPC_POLL_US_MAX 4000 /* SPDK's own period: a longer one would make it slower */
#define RPC_POLL_OPT_IDX 1024
#define FAST_SUFFIX ".nodeos-tgt"

static struct option g_long_opts[] = {
	{"rpc-poll-us", required_argument, NULL, RPC_POLL_OPT_IDX},
	{NULL, 0, NULL, 0},
};

static uint64_t g_rpc_poll_us = RPC_POLL_US_DEFAULT;
static const char *g_rpc_addr;
static struct spdk_rpc_server *g_fast_server;
static struct spdk_poller *g_fast_poller;

static void
nodeos_tgt_usage(void)
{
	printf(" --rpc-poll-us <us>        answer the RPC socket every <us> microseconds, 0..%d "
	       "(default %d; 0: SPDK's own 4 ms poll)\n", RPC_POLL_US_MAX, RPC_POLL_US_DEFAULT);
}

static int
nodeos_tgt_parse_arg(int ch, char *arg)
{
	long v;

	if (ch != RPC_POLL_OPT_IDX) {
		return -EINVAL;
	}
	v = spdk_strtol(arg, 10);
	if (v < 0 || v > RPC_POLL_US_MAX) {
		fprintf(stderr, "--rpc-poll-us: %s is not a number of microseconds in 0..%d\n",
			arg, RPC_POLL_US_MAX);
		return -EINVAL;
	}
	g_rpc_poll_us = (uint64_t)v;
	return 0;
}

static int
fast_rpc_poll(void *arg)
{
	spdk_rpc_server_accept(g_fast_server);
	return SPDK_POLLER_BUSY;
}

static void
fast_rpc_start(void)
{
	char tmp[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int rc;

	if (g_rpc_addr == NULL || g_rpc_poll_us == 0) {
		return;
	}
	if (spdk_interrupt_mode_is_enabled()) {
		/* A period poller would wake the idle reactor every g_rpc_poll_us: the opposite of
		 * what interrupt mode is chosen for. */
		SPDK_NOTICELOG("interrupt mode: RPC answered at SPDK's own poll\n");
		return;
	}
	rc = snprintf(tmp, sizeof(tmp), "%s%s", g_rpc_addr, FAST_SUFFIX);
	if (rc < 0 || (size_t)rc >= sizeof(tmp)) {
		SPDK_ERRLOG("RPC path %s too long for %s: RPC answered at SPDK's own poll\n",
			    g_rpc_addr, FAST_SUFFIX);
		return;
	}
	g_fast_server = spdk_rpc_server_listen(tmp);
	if (g_fast_server == NULL) {
		SPDK_ERRLOG("cannot listen on %s: RPC answered at SPDK's own poll\n", tmp);
		return;
	}
	if (rename(tmp, g_rpc_addr) != 0) {
		SPDK_ERRLOG("cannot move %s over %s: %s: RPC answered at SPDK's own poll\n",
			    tmp, g_rpc_addr, spdk_strerror(errno));
		spdk_rpc_server_close(g_fast_server);
		g_fast_server = NULL;
		return;
	}
	g_fast_poller = SPDK_POLLER_REGISTER(fast_rpc_poll, NULL, g_rpc_poll_us);
	SPDK_NOTICELOG("RPC on %s answered every %" PRIu64 " us\n", g_rpc_addr, g_rpc_poll_us);
}

static void
fast_rpc_stop(void)
{
	spdk_poller_unregister(&g_fast_poller);
	if (g_fast_server != NULL) {
		/* Closes its connections and removes its lock file; SPDK's own server, closed after
		 * this by spdk_app_stop, removes the -r path. */
		spdk_rpc_server_close(g_fast_server);
		g_fast_server = NULL;
	}
}

static void
nodeos_tgt_started(void *arg)
{
	fast_rpc_start();
}

static void
nodeos_tgt_shutdown(void)
{
	fast_rpc_stop();
	spdk_app_stop(0);
}

int
main(int argc, char **argv)
{
	struct spdk_app_opts opts = {};
	int rc;

	spdk_app_opts_init(&opts, sizeof(opts));
	opts.name = "nvmf";
	opts.shutdown_cb = nodeos_tgt_shutdown;
	rc = spdk_app_parse_args(argc, argv, &opts, "", g_long_opts, nodeos_tgt_parse_arg,
				 nodeos_tgt_usage);
	if (rc != SPDK_APP_PARSE_ARGS_SUCCESS) {
		exit(rc);
	}
	g_rpc_addr = opts.rpc_addr;

	/* Blocks until the application is exiting */
	rc = spdk_app_start(&opts, nodeos_tgt_started, NULL);
	if (g_fast_server != NULL) {
		/* Stopped without a signal (spdk_app_stop from inside): the reactors are gone, so
		 * only the server's sockets and lock file are left to close. */
		spdk_rpc_server_close(g_fast_server);
		g_fast_server = NULL;
	}
	spdk_app_fini();
	return rc;
}
