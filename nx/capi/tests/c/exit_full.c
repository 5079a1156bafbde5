/* Node 0 sends node 1 more messages than node 1's packet buffers hold (isend: the rest wait
 * in node 0's queue) and leaves while node 1, outside NX, waits for it to be gone (the end
 * of a FIFO that node 0 holds open until it exits). Node 0 delivers them before it goes (node
 * 1 lives: it may receive them), which it can only do if node 1 takes them out of its
 * packet buffers when told. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "nx.h"
#include "check.h"

int main(void) {
    long me = mynode();
    char path[96], b[100] = {0}, w;
    if (me < 2) {
        snprintf(path, sizeof path, "/tmp/nx-exit-full-%ld", (long)getppid());
        CHECK(mkfifo(path, 0600) == 0 || errno == EEXIST, "mkfifo %s", path);
    }
    gsync();
    if (me == 0) {
        for (long i = 0; i < 64; i++) msgignore(isend(8, b, sizeof b, 1, 0));
        CHECK(open(path, O_WRONLY) >= 0, "opening %s", path);
    } else if (me == 1) {
        int fd = open(path, O_RDONLY);
        CHECK(fd >= 0, "opening %s", path);
        unlink(path);
        CHECK(read(fd, &w, 1) == 0, "the end of the FIFO");
    }
    printf("exit_full node %ld: ok\n", me);
    fflush(stdout);
    return 0;
}
