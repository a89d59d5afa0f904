/* The floor under any tcp transport on this machine, for benches/compare/compare.sh -t:
 * raw TCP over loopback between two processes pinned to cores 0 and 1, TCP_NODELAY,
 * busy-polled non-blocking sends and receives, no framing at all. Same method and
 * output as `osu` (OSU's loop counts; `# ` header lines, then `%-10d%20.2f` rows):
 *
 *   tcp_floor lat|bw [-m MIN] [-M MAX] [-l PORT | -c ADDR:PORT]
 *       lat: half a round trip (us); bw: MB/s, window 64, the receiver acknowledging
 *       each window with a byte; sizes the powers of two from MIN (default 1) to MAX
 *       -l, -c: the two ends on two hosts (benches/compare/nodes.sh: two simulated
 *       nodes), one listening on PORT, the other (which prints) connecting to it;
 *       without them both ends run here, over loopback
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LARGE 8192
#define WINDOW 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    sched_setaffinity(0, sizeof set, &set);
}

/* Move all n bytes, spinning on would-block; a closed peer ends this process. */
static void move(int fd, char *buf, size_t n, int sending) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = sending ? send(fd, buf + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                            : recv(fd, buf + done, n - done, MSG_DONTWAIT);
        if (r > 0)
            done += (size_t)r;
        else if (r == 0)
            exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "lat") && strcmp(argv[1], "bw"))) {
        fprintf(stderr, "usage: %s lat|bw [-m MIN] [-M MAX]\n", argv[0]);
        return 1;
    }
    int bw = !strcmp(argv[1], "bw");
    size_t min = 1, max = 4194304;
    const char *listen_port = 0, *peer = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m"))
            min = strtoul(argv[i + 1], 0, 0);
        else if (!strcmp(argv[i], "-M"))
            max = strtoul(argv[i + 1], 0, 0);
        else if (!strcmp(argv[i], "-l"))
            listen_port = argv[i + 1];
        else if (!strcmp(argv[i], "-c"))
            peer = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s lat|bw [-m MIN] [-M MAX] [-l PORT | -c ADDR:PORT]\n", argv[0]);
            return 1;
        }
    }

    /* TCP_FLOOR_CONGESTION: a congestion control algorithm for both ends (a listener's
       passes to the connections it accepts); unset, the system's. */
    const char *cc = getenv("TCP_FLOOR_CONGESTION");
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (cc && setsockopt(listener, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc))) {
        perror("tcp_floor: TCP_FLOOR_CONGESTION");
        return 1;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl(peer || listen_port ? INADDR_ANY : INADDR_LOOPBACK);
    if (listen_port)
        addr.sin_port = htons((unsigned short)atoi(listen_port));
    socklen_t len = sizeof addr;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (!peer && (bind(listener, (void *)&addr, sizeof addr) || listen(listener, 1) ||
                  getsockname(listener, (void *)&addr, &len))) {
        perror("tcp_floor: listening");
        return 1;
    }
    char host[64] = "";
    if (peer) {
        const char *colon = strrchr(peer, ':');
        if (!colon || colon - peer >= (long)sizeof host) {
            fprintf(stderr, "tcp_floor: -c takes ADDR:PORT, not %s\n", peer);
            return 1;
        }
        memcpy(host, peer, (size_t)(colon - peer));
        addr.sin_port = htons((unsigned short)atoi(colon + 1));
        if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
            fprintf(stderr, "tcp_floor: %s is no IPv4 address\n", host);
            return 1;
        }
    }
    /* Two hosts: this process is one end (the connecting one is the origin, which
       prints); one host: the child connects, the parent is the origin. */
    pid_t child = peer ? 0 : listen_port ? -1 : fork();
    int fd;
    if (peer) {
        pin(0);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (cc)
            setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc));
        /* The listening end may not be up yet: retry for up to 10 s. */
        int tries = 0;
        while (connect(fd, (void *)&addr, sizeof addr)) {
            if (++tries > 1000) {
                perror("tcp_floor: connecting");
                return 1;
            }
            usleep(10000);
        }
    } else if (listen_port) {
        pin(1);
        fd = accept(listener, 0, 0);
    } else if (child == 0) {
        pin(1);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (cc)
            setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc));
        if (connect(fd, (void *)&addr, sizeof addr))
            return 1;
    } else {
        pin(0);
        fd = accept(listener, 0, 0);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char *buf = malloc(max ? max : 1), ack = 0;
    memset(buf, 1, max ? max : 1);
    int origin = peer ? 1 : listen_port ? 0 : child != 0;
    if (origin) {
        printf("# tcp_floor %s: raw TCP over %s, TCP_NODELAY, busy-polled, congestion control %s\n",
               argv[1], peer ? peer : "loopback", cc ? cc : "the system's");
        printf("# Size %s\n", bw ? "Bandwidth (MB/s)" : "Latency (us)");
    }
    /* From 1 byte at least: a message of none moves nothing over a raw socket. */
    size_t first = 1;
    while (first < min)
        first *= 2;
    for (size_t size = first; size <= max; size *= 2) {
        int iters, skip;
        if (bw) {
            iters = size > LARGE ? 20 : 100;
            skip = size > LARGE ? 2 : 10;
        } else {
            iters = size > LARGE ? 1000 : 10000;
            skip = size > LARGE ? 10 : 100;
        }
        double start = 0;
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip)
                start = now();
            if (bw) {
                for (int w = 0; w < WINDOW; w++)
                    move(fd, buf, size, origin);
                move(fd, &ack, 1, !origin);
            } else if (origin) {
                move(fd, buf, size, 1);
                move(fd, buf, size, 0);
            } else {
                move(fd, buf, size, 0);
                move(fd, buf, size, 1);
            }
        }
        double t = now() - start;
        if (origin) {
            double value = bw ? (double)size * WINDOW * iters / t / 1e6 : t * 1e6 / iters / 2;
            printf("%-10zu%20.2f\n", size, value);
            fflush(stdout);
        }
    }
    if (origin && !peer)
        wait(0);
    return 0;
}
