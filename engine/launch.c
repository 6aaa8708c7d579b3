/* launch.c: taco-train as the launcher of a job's ranks (job option gpus,
 * docs/multi-gpu.md). A job of gpus N > 1 started as one process (by
 * tacod, or by hand) runs `mpirun -np N` of this same program and stays
 * its parent, so that to tacod it is one worker as before:
 *  - rank 0 writes its events to a FIFO the launcher relays to the events
 *    descriptor (mpirun's daemon closes every descriptor above 2);
 *  - a stop (SIGTERM, SIGINT) goes to the ranks as SIGUSR1, which mpirun
 *    forwards and which each rank takes as a stop: they agree on the step,
 *    rank 0 checkpoints, all exit 3;
 *  - mpirun ends every rank when one dies; a rank killed by a signal ends
 *    the launcher by the same signal, so that tacod retries the job from
 *    its checkpoint as it retries a crashed worker.
 * Inside a Slurm allocation of at least N tasks (tacod's batch script asks
 * for N, one GPU each) the ranks are started with srun instead, as one job
 * step: Slurm then accounts for them, and ends them with the step. */
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ARGS 64

/* All of buf to fd; a reader that went away (tacod) is not an error. */
static void relay(int fd, const char *buf, size_t n)
{
	while (fd >= 0 && n) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		buf += w;
		n -= (size_t)w;
	}
}

/* What the FIFO holds now, to fd. */
static void drain(int fifo, int fd)
{
	char buf[65536];
	ssize_t n;

	while ((n = read(fifo, buf, sizeof(buf))) > 0 ||
	       (n < 0 && errno == EINTR))
		if (n > 0)
			relay(fd, buf, (size_t)n);
}

static pid_t start(char *const *argv)
{
	pid_t pid = fork();

	if (pid)
		return pid;
	/* mpirun (srun) ends the ranks when it is ended: with the launcher */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	execvp(argv[0], argv);
	fprintf(stderr,
		"taco-train: cannot run %s: %s (%s; docs/multi-gpu.md)\n",
		argv[0], strerror(errno),
		strcmp(argv[0], "srun") ? "install openmpi-bin"
					: "a Slurm node without srun");
	_exit(127);
}

/* Whether this process runs inside a Slurm allocation that has room for
 * n tasks: then srun starts the ranks. TACO_LAUNCHER (mpirun or srun)
 * decides instead when set. */
static int use_srun(int n)
{
	const char *l = getenv("TACO_LAUNCHER"), *t = getenv("SLURM_NTASKS");

	if (l && l[0])
		return !strcmp(l, "srun");
	return getenv("SLURM_JOB_ID") && t && atoi(t) >= n;
}

int taco_launch_ranks(int n, char *const *rank_args, int events_fd,
		      const volatile sig_atomic_t *stop)
{
	char dir[] = "/tmp/taco-train-XXXXXX", fifo[64], np[16], ntasks[32];
	char self[PATH_MAX];
	char *argv[MAX_ARGS + 16];
	int k = 0, rfd = -1, status = 0, forwarded = 0, code = 1;
	ssize_t len;
	pid_t pid;

	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0 || !mkdtemp(dir)) {
		fprintf(stderr, "taco-train: gpus %d: %s\n", n,
			strerror(errno));
		return 1;
	}
	self[len] = 0;
	snprintf(fifo, sizeof(fifo), "%s/events", dir);
	snprintf(np, sizeof(np), "%d", n);
	/* the read end first, so that rank 0's open does not block */
	if (mkfifo(fifo, 0600) ||
	    (rfd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
		fprintf(stderr, "taco-train: gpus %d: %s: %s\n", n, fifo,
			strerror(errno));
		goto out;
	}
	if (use_srun(n)) {
		snprintf(ntasks, sizeof(ntasks), "--ntasks=%d", n);
		argv[k++] = "srun";
		argv[k++] = ntasks;
		argv[k++] = "--nodes=1";
		/* MPI_Init over Slurm's PMIx; a rank that fails ends the
		 * step, as mpirun ends the others */
		argv[k++] = "--mpi=pmix";
		argv[k++] = "--kill-on-bad-exit=1";
		argv[k++] = "--cpu-bind=none";
		/* what mpirun's --mca below says, for ranks srun starts */
		setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
	} else {
		argv[k++] = "mpirun";
		argv[k++] = "-np";
		argv[k++] = np;
		/* one rank a GPU, whatever mpirun counts as slots; no
		 * pinning, so each rank's OpenMP threads keep their cores */
		argv[k++] = "--oversubscribe";
		argv[k++] = "--bind-to";
		argv[k++] = "none";
		/* shared memory without the cross-memory attach that
		 * containers forbid */
		argv[k++] = "--mca";
		argv[k++] = "btl_vader_single_copy_mechanism";
		argv[k++] = "none";
		if (geteuid() == 0) /* tacod runs as its own user; tests as
				       root */
			argv[k++] = "--allow-run-as-root";
	}
	argv[k++] = self;
	argv[k++] = "--events-file";
	argv[k++] = fifo;
	for (int i = 0; rank_args[i] && i < MAX_ARGS; i++)
		argv[k++] = rank_args[i];
	argv[k] = NULL;
	if ((pid = start(argv)) < 0) {
		fprintf(stderr, "taco-train: gpus %d: fork: %s\n", n,
			strerror(errno));
		goto out;
	}
	for (;;) {
		struct pollfd p = {.fd = rfd, .events = POLLIN};
		pid_t w;

		if (stop && *stop && !forwarded) {
			kill(pid, SIGUSR1); /* to every rank: a stop */
			forwarded = 1;
		}
		if (poll(&p, 1, 100) > 0)
			drain(rfd, events_fd);
		w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			status = 1 << 8;
			break;
		}
	}
	drain(rfd, events_fd);
	if (WIFEXITED(status)) {
		code = WEXITSTATUS(status);
		/* 128 + N: a rank died of signal N; 0 and 3 as a rank's */
		if (code > 128 && code < 128 + 32) {
			signal(code - 128, SIG_DFL);
			kill(getpid(), code - 128);
		}
		if (code != 0 && code != 3)
			code = 1;
	} else if (WIFSIGNALED(status)) {
		signal(WTERMSIG(status), SIG_DFL);
		kill(getpid(), WTERMSIG(status));
	}
out:
	if (rfd >= 0)
		close(rfd);
	unlink(fifo);
	rmdir(dir);
	return code;
}
