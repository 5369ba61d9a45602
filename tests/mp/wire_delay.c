/*
 * wire_delay.c - a fixed propagation delay for the links between the
 * namespace hosts of tests/mp/hosts_test.sh (--delay), on kernels without
 * sch_netem: no qdisc here can hold a packet for a time (netem, fq and etf
 * are not built, and a tc BPF program can stamp skb->tstamp but cannot
 * hold a packet), so a program holds them instead.
 *
 *   wire_delay --dev TUN --delay US [--owner PID] [--queue MIB] [--fifo P]
 *
 * TUN is an existing tun device (`ip tuntap add dev TUN mode tun`) in the
 * hosts' router namespace, where policy routing sends every packet that a
 * host puts on its link into TUN. wire_delay reads each packet, holds it
 * for US microseconds from the moment it read it (CLOCK_MONOTONIC) and
 * writes it back to TUN, from where the main routing table delivers it to
 * the destination host. The delay is the same for every packet and the
 * queue is one FIFO, so packets leave in the order they came (no
 * reordering, as on a wire). The thread sleeps in ppoll() until the next
 * packet is due or one arrives: no busy waiting, as it shares the cores
 * with the ranks. Timer wakeups come 10-30 us late here (timer slack is set
 * to 1 ns; the rest is the virtual machine), so the timer is set early by
 * a learned margin (wakeup_learn), never sending before the packet is due.
 * With --fifo P it runs at SCHED_FIFO priority P: under a full CPU load,
 * normal scheduling made bulk packets 250 us late on average, SCHED_FIFO
 * 70 us (it still uses 10-40 % of a core).
 *
 * The queue holds up to MIB MiB of packets (default 64: 50 ms at 10
 * Gbit/s); when it is full wire_delay stops reading and the kernel drops at
 * TUN's own queue, as a full router would. One thread carries every packet
 * of every host, so give the links a large MTU (hosts_test.sh: 65000):
 * one 64 KB packet costs about 20 us here to read and write (the receiving
 * host's stack runs in the write), 0.4-0.6 s of CPU per GB, so one core
 * moves 13-20 Gbit/s in all; on 2 cores shared with the sender and the
 * receiver, one TCP stream through it reached 7-16 Gbit/s, against 11-18
 * over the bridge. With --owner, wire_delay exits when process PID exits
 * (the script that made the hosts, even if it was killed with SIGKILL). On
 * SIGTERM, SIGINT or its owner's exit it prints one line of statistics
 * (packets, bytes, how late they went, queue peak, CPU time) and exits 0.
 * Exit status: 0 stopped normally, 1 error (message on stderr), 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_PACKET 65536 /* bytes: the largest IP packet and then some */
/* Packets read (or sent) before turning to the other side: a 64 KB packet
 * takes some 10-30 us to copy and deliver, so a longer run keeps due
 * packets (or arriving ones, whose delay counts from their read) waiting. */
#define BATCH 4

/* One queued packet; its bytes follow, the record padded to 16 bytes. A
 * record with len == WRAP marks the unused end of the ring. */
typedef struct {
  uint64_t due_ns; /* CLOCK_MONOTONIC time to send it */
  uint32_t len;    /* bytes */
  uint32_t pad;
} rec_t;
#define WRAP UINT32_MAX
#define ALIGN16(x) (((x) + 15) & ~(size_t)15)

typedef struct {
  unsigned char *buf;
  size_t cap;  /* bytes, a multiple of 16 */
  size_t head; /* oldest record */
  size_t tail; /* where the next record goes */
  size_t used; /* bytes from head to tail, WRAP padding included */
} ring_t;

typedef struct {
  uint64_t packets, bytes, dropped; /* dropped: writes TUN refused */
  uint64_t late_sum_ns, late_max_ns, late_50us;
  uint64_t full; /* times reading stopped on a full queue */
  size_t peak;   /* bytes queued at most */
} stats_t;

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Room for one more packet of any size at the tail, wrapping the tail to
 * the start when the end of the buffer is too short. NULL: queue full. */
static rec_t *ring_reserve(ring_t *q) {
  size_t need = ALIGN16(sizeof(rec_t) + MAX_PACKET);
  if (q->used == 0)
    q->head = q->tail = 0;
  if (q->tail >= q->head && q->used < q->cap) {
    if (q->cap - q->tail >= need)
      return (rec_t *)(q->buf + q->tail);
    if (q->head < need)
      return NULL;
    ((rec_t *)(q->buf + q->tail))->len = WRAP;
    q->used += q->cap - q->tail;
    q->tail = 0;
  }
  if (q->head - q->tail >= need)
    return (rec_t *)(q->buf + q->tail);
  return NULL;
}

static void ring_commit(ring_t *q, uint32_t len) {
  size_t sz = ALIGN16(sizeof(rec_t) + len);
  q->tail += sz;
  q->used += sz;
  if (q->tail == q->cap)
    q->tail = 0;
}

/* Oldest packet, NULL when none is queued. */
static rec_t *ring_front(ring_t *q) {
  if (q->used == 0)
    return NULL;
  rec_t *r = (rec_t *)(q->buf + q->head);
  if (r->len == WRAP) {
    q->used -= q->cap - q->head;
    q->head = 0;
    if (q->used == 0)
      return NULL;
    r = (rec_t *)q->buf;
  }
  return r;
}

static void ring_pop(ring_t *q, const rec_t *r) {
  size_t sz = ALIGN16(sizeof(rec_t) + r->len);
  q->head += sz;
  q->used -= sz;
  if (q->head == q->cap)
    q->head = 0;
}

static int tun_attach(const char *name) {
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr,
            "wire_delay: open /dev/net/tun: %s (needs root and "
            "CONFIG_TUN)\n",
            strerror(errno));
    return -1;
  }
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    fprintf(stderr,
            "wire_delay: attach to tun %s: %s (make it first: ip "
            "tuntap add dev %s mode tun)\n",
            name, strerror(errno), name);
    close(fd);
    return -1;
  }
  return fd;
}

/* Writes up to BATCH packets that are due and returns how many; *next is
 * when the oldest packet left is due, 0 when none is queued. */
static int send_due(int fd, ring_t *q, stats_t *st, uint64_t *next) {
  uint64_t now = now_ns();
  rec_t *r;
  int sent = 0;
  *next = 0;
  while ((r = ring_front(q)) != NULL) {
    if (r->due_ns > now) {
      now = now_ns(); /* writes take time: look again before sleeping */
      if (r->due_ns > now) {
        *next = r->due_ns;
        break;
      }
    }
    if (sent == BATCH) {
      *next = r->due_ns;
      break;
    }
    uint64_t late = now - r->due_ns;
    st->late_sum_ns += late;
    if (late > st->late_max_ns)
      st->late_max_ns = late;
    if (late > 50000)
      st->late_50us++;
    if (write(fd, r + 1, r->len) != (ssize_t)r->len)
      st->dropped++; /* no route or host gone: as a wire would lose it */
    st->packets++;
    st->bytes += r->len;
    ring_pop(q, r);
    sent++;
  }
  return sent;
}

/* Reads up to BATCH packets, each due delay_ns after it was read, fewer
 * when TUN has no more or the queue is full. Returns how many, -1 on an
 * error of the device. */
static int read_some(int fd, ring_t *q, uint64_t delay_ns, stats_t *st) {
  int got = 0;
  while (got < BATCH) {
    rec_t *r = ring_reserve(q);
    if (r == NULL)
      break;
    ssize_t n = read(fd, r + 1, MAX_PACKET);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR)
        break;
      fprintf(stderr, "wire_delay: read from tun: %s\n", strerror(errno));
      return -1;
    }
    r->due_ns = now_ns() + delay_ns;
    r->len = (uint32_t)n;
    ring_commit(q, r->len);
    if (q->used > st->peak)
      st->peak = q->used;
    got++;
  }
  return got;
}

/* How early to set the timer, from one more wakeup that came `late` ns
 * after the time asked for. Timer wakeups here come 10-30 us late (a
 * virtual machine's timer, the scheduler), which would add that much to
 * every delay; aiming early by the 10th percentile of that lateness (a
 * running estimate) makes 9 wakeups in 10 come at or just after the time
 * the packet is due, and the 10th sleeps the rest (late again, never
 * early). */
static uint64_t wakeup_learn(uint64_t early_ns, uint64_t late) {
  if (late < early_ns)
    early_ns = early_ns > 900 ? early_ns - 900 : 0;
  else if (early_ns < 200000)
    early_ns += 100;
  return early_ns;
}

static int usage(void) {
  fprintf(stderr, "usage: wire_delay --dev TUN --delay US [--owner PID] "
                  "[--queue MIB] [--fifo PRIO]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *dev = NULL;
  double delay_us = -1;
  long owner = 0, queue_mib = 64, fifo = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (v == NULL)
      return usage();
    if (strcmp(a, "--dev") == 0)
      dev = v;
    else if (strcmp(a, "--delay") == 0)
      delay_us = strtod(v, &end);
    else if (strcmp(a, "--owner") == 0)
      owner = strtol(v, &end, 10);
    else if (strcmp(a, "--queue") == 0)
      queue_mib = strtol(v, &end, 10);
    else if (strcmp(a, "--fifo") == 0)
      fifo = strtol(v, &end, 10);
    else
      return usage();
    if (end != NULL && (*end != '\0' || end == v)) {
      fprintf(stderr, "wire_delay: %s wants a number, got '%s'\n", a, v);
      return 2;
    }
    i++;
  }
  if (dev == NULL || delay_us < 0 || delay_us > 10e6 || owner < 0 ||
      queue_mib < 1 || queue_mib > 4096 || fifo < 0 || fifo > 99)
    return usage();
  uint64_t delay_ns = (uint64_t)(delay_us * 1000.0 + 0.5);

  /* ppoll's timeout is otherwise rounded up by 50 us of timer slack: as
   * much as the shortest delays asked for */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
  int pidfd = -1;
  if (owner > 0) {
    pidfd = (int)syscall(SYS_pidfd_open, (pid_t)owner, 0);
    if (pidfd < 0 && errno == ESRCH) {
      fprintf(stderr, "wire_delay: owner pid %ld is gone\n", owner);
      return 1;
    }
  }

  sigset_t block, wait_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGHUP);
  sigprocmask(SIG_BLOCK, &block, &wait_mask);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  ring_t q = {.cap = (size_t)queue_mib << 20};
  q.buf = malloc(q.cap);
  if (q.buf == NULL) {
    fprintf(stderr, "wire_delay: no memory for a %ld MiB queue\n", queue_mib);
    return 1;
  }
  int fd = tun_attach(dev);
  if (fd < 0) {
    free(q.buf);
    return 1;
  }
  char sched[160] = "normal scheduling";
  if (fifo > 0) {
    struct sched_param sp = {.sched_priority = (int)fifo};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) == 0)
      snprintf(sched, sizeof(sched), "SCHED_FIFO %ld", fifo);
    else /* a container or cgroup without real-time time: late under load */
      snprintf(sched, sizeof(sched),
               "normal scheduling (SCHED_FIFO %ld refused: %s)", fifo,
               strerror(errno));
  }
  printf("wire_delay: %s attached, %.1f us each way, queue %ld MiB, %s\n", dev,
         delay_us, queue_mib, sched);
  fflush(stdout);

  stats_t st = {0};
  uint64_t t0 = now_ns();
  int rc = 0;
  uint64_t early_ns = 5000;
  int readable = 1; /* TUN may have packets: ppoll said so, or a full batch */
  while (!stop_signal) {
    int got = 0;
    if (readable) {
      got = read_some(fd, &q, delay_ns, &st);
      if (got < 0) {
        rc = 1;
        break;
      }
    }
    uint64_t next;
    int sent = send_due(fd, &q, &st, &next);
    if (got == BATCH || sent == BATCH) { /* more to do: look at both sides */
      readable = 1;
      continue;
    }
    /* a full queue reads nothing until the head has gone out: TUN's own
     * queue fills meanwhile, then drops */
    int room = ring_reserve(&q) != NULL;
    if (!room)
      st.full++;
    struct pollfd pfd[2] = {{.fd = fd, .events = room ? POLLIN : 0},
                            {.fd = pidfd, .events = POLLIN}};
    struct timespec ts, *tsp = NULL;
    uint64_t aim = 0;
    if (next != 0) {
      uint64_t now = now_ns();
      if (next <= now)
        continue;
      uint64_t left = next - now;
      if (left > early_ns) { /* else: woke early last time, sleep it out */
        aim = next - early_ns;
        left -= early_ns;
      }
      ts.tv_sec = (time_t)(left / 1000000000u);
      ts.tv_nsec = (long)(left % 1000000000u);
      tsp = &ts;
    } else if (owner > 0 && pidfd < 0) { /* no pidfd: look each second */
      ts.tv_sec = 1;
      ts.tv_nsec = 0;
      tsp = &ts;
    }
    int n = ppoll(pfd, pidfd >= 0 ? 2 : 1, tsp, &wait_mask);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "wire_delay: ppoll: %s\n", strerror(errno));
      rc = 1;
      break;
    }
    if (n == 0 && aim != 0)
      early_ns = wakeup_learn(early_ns, now_ns() - aim);
    if (n > 0 && pidfd >= 0 && (pfd[1].revents & POLLIN))
      break;
    if (pidfd < 0 && owner > 0 && kill((pid_t)owner, 0) < 0 && errno == ESRCH)
      break;
    if (n > 0 && (pfd[0].revents & (POLLERR | POLLHUP))) {
      fprintf(stderr, "wire_delay: tun %s reported an error\n", dev);
      rc = 1;
      break;
    }
    readable = n > 0 && (pfd[0].revents & POLLIN);
  }
  double secs = (double)(now_ns() - t0) / 1e9;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu =
      (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
      ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
  printf("wire_delay: %s: %llu packets, %.1f MB in %.1f s; sent %.1f us "
         "after due on average, %.1f us at most, %llu over 50 us; queue peak "
         "%.2f MiB, full at %llu wakeups; %llu refused; cpu %.2f s (%.0f%% of "
         "a core)\n",
         dev, (unsigned long long)st.packets, (double)st.bytes / 1e6, secs,
         st.packets ? (double)st.late_sum_ns / (double)st.packets / 1e3 : 0.0,
         (double)st.late_max_ns / 1e3, (unsigned long long)st.late_50us,
         (double)st.peak / (1 << 20), (unsigned long long)st.full,
         (unsigned long long)st.dropped, cpu,
         secs > 0 ? 100.0 * cpu / secs : 0.0);
  close(fd);
  if (pidfd >= 0)
    close(pidfd);
  free(q.buf);
  return rc;
}
