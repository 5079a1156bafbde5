/* A handler receive whose message is too long for its buffer fails: its handler does not
 * run, and the process's next call that polls returns the error (EQMSGLONG), for a one-copy
 * and for a zero-copy message (run with a threshold under 64 KiB). The job goes on; a
 * blocking zero-copy send that returns such an error still delivers its message. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nx.h"
#include "check.h"

static volatile long ran = 0, got = -1;

static void h(long type, long count, long node, long ptype) {
    (void)type, (void)node, (void)ptype;
    got = count;
    ran++;
}

/* Node 0 sends `len` bytes of type `t` to node 1's handler receive of `cap` bytes. */
static void too_long(long t, long len, long cap, unsigned char *buf) {
    long me = mynode();
    /* No synchronisation between the receive and the send (a blocking call of node 1's
     * could return the error): the message may come before its receive or after. */
    if (me == 1) {
        CHECK(_hrecv(t, buf, cap, h) >= 0, "hrecv");
        /* Until the message has come: the error, or (wrongly) its handler. */
        long r;
        while ((r = _iprobe(99)) == 0 && ran == 0) {
        }
        CHECK(ran == 0, "type %ld: the handler ran (count %ld) into %ld bytes", t, got, cap);
        CHECK(r == -1 && errno == EQMSGLONG, "type %ld: iprobe %ld errno %d", t, r, errno);
        CHECK(_iprobe(99) == 0, "the error is reported once");
    } else if (me == 0) {
        fill(buf, len, t);
        csend(t, buf, len, 1, 0);
    }
    gsync();
}

/* Node 1's _csend of a zero-copy message returns the error of a handler receive that
 * failed before it (node 0 sent the message, then said so outside NX): the message still
 * arrives whole at node 0, which receives it only then. */
static void error_during_send(unsigned char *buf, long cap, long len) {
    long me = mynode();
    char path[96], w = 'x';
    if (me < 2) {
        snprintf(path, sizeof path, "/tmp/nx-hrecv-error-%ld", (long)getppid());
        CHECK(mkfifo(path, 0600) == 0 || errno == EEXIST, "mkfifo %s", path);
    }
    if (me == 1) {
        CHECK(_hrecv(6, buf, 8, h) >= 0, "hrecv");
        int fd = open(path, O_RDONLY);
        CHECK(fd >= 0 && read(fd, &w, 1) == 1, "reading %s", path);
        close(fd);
        unlink(path);
        unsigned char *out = malloc(len);
        fill(out, len, 66);
        long r = _csend(7, out, len, 0, 0);
        CHECK(r == -1 && errno == EQMSGLONG, "csend: %ld errno %d", r, errno);
        CHECK(ran == 0, "the handler ran");
        free(out);
    } else if (me == 0) {
        csend(6, buf, 100, 1, 0);
        int fd = open(path, O_WRONLY);
        CHECK(fd >= 0 && write(fd, &w, 1) == 1, "writing %s", path);
        close(fd);
        long r = _crecv(7, buf, cap);
        long bad = verify(buf, len, 66);
        CHECK(r == len && bad < 0, "crecv: %ld errno %d, byte %ld wrong", r, errno, bad);
    }
    gsync();
}

int main(void) {
    long me = mynode(), big = 64L << 10;
    unsigned char *buf = malloc(big);
    CHECK(buf, "malloc");
    too_long(3, 100, 8, buf);
    too_long(4, big, 1000, buf);
    error_during_send(buf, big, big - 5);
    /* A handler receive that fits still works. */
    if (me == 1) {
        CHECK(_hrecv(5, buf, big, h) >= 0, "hrecv");
        gsync();
        while (ran == 0) _iprobe(99);
        CHECK(ran == 1 && got == big && verify(buf, big, 5) < 0, "handler: %ld, %ld", ran, got);
    } else {
        gsync();
        if (me == 0) {
            unsigned char *out = malloc(big);
            fill(out, big, 5);
            csend(5, out, big, 1, 0);
        }
    }
    gsync();
    printf("hrecv_error node %ld: ok\n", me);
    return 0;
}
