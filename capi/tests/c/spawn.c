/*
 * spawn.c - vmmc_Spawn and vmmc_SessionHosts from C:
 *   vmmc-run -n 1 --transport tcp -- ./spawn                  (spawns; exit 0)
 *   vmmc-run -n 1 --transport shm --spawn-slots 2 -- ./spawn  (spawns; exit 0)
 *   ./spawn                      (alone: VMMC_ERR_UNSUPPORTED, nobody can start a process)
 *
 * Rank 0 prints the session's hosts, checks that spawning a missing program fails with
 * VMMC_ERR_SPAWN, then spawns itself ("child") on the first session host. The child finds
 * its parent with vmmc_Parent, exports buffer 7 and imports the parent's buffer 1, writes
 * 0xC0DE into it, and waits for the parent's word in its own buffer; the parent imports the
 * child's buffer 7 by the node and squid vmmc_Spawn returned and writes 0xBEEF into it.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vmmc.h>

#define BUF_LEN 4096
#define TIMEOUT_S 10.0

static const char *who = "parent";

static void must(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "spawn %s: FAILED: %s: %s (%d)\n", who, what, vmmc_ErrorStr(rc), rc);
        exit(1);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits for `want` in the first word of `buf` (written by another process). */
static void wait_word(volatile uint32_t *buf, uint32_t want, const char *what)
{
    double t0 = now();
    while (__atomic_load_n(buf, __ATOMIC_ACQUIRE) != want) {
        if (now() - t0 > TIMEOUT_S) {
            fprintf(stderr, "spawn %s: FAILED: no %s after %.0f s\n", who, what, TIMEOUT_S);
            exit(1);
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

static void send_word(int node, int squid, uint32_t bufid, uint32_t value)
{
    void *dest;
    size_t len;
    must(vmmc_ImportRecvBuf(node, squid, bufid, &dest, &len), "vmmc_ImportRecvBuf");
    must(vmmc_SendData(dest, &value, 1), "vmmc_SendData");
}

int main(int argc, char **argv)
{
    char hosts[1024];
    int n = vmmc_SessionHosts(hosts, sizeof hosts);
    must(n, "vmmc_SessionHosts");
    char first[256];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(hosts, "\n"), hosts);
    uint32_t *buf = vmmc_AllocRecvBuf(BUF_LEN);
    if (buf == NULL)
        must(-1, "vmmc_AllocRecvBuf");

    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        who = "child";
        int pnode, psquid;
        must(vmmc_Parent(&pnode, &psquid), "vmmc_Parent");
        if (pnode < 0) {
            fprintf(stderr, "spawn child: FAILED: no parent\n");
            return 1;
        }
        must(vmmc_ExportRecvBuf(7, buf, BUF_LEN, NULL, NULL, 0, 0), "vmmc_ExportRecvBuf");
        send_word(pnode, psquid, 1, 0xC0DE);
        wait_word(buf, 0xBEEF, "word from the parent");
        printf("spawn child %d:%d of parent %d:%d: ok\n", vmmc_MyNode(), vmmc_GetSquid(), pnode,
               psquid);
        return 0;
    }

    printf("spawn session hosts: %s\n", hosts);
    must(vmmc_ExportRecvBuf(1, buf, BUF_LEN, NULL, NULL, 0, 0), "vmmc_ExportRecvBuf");
    int node = -1, squid = -1;
    int rc = vmmc_Spawn(first, "/nonexistent/vmmc-program", NULL, &node, &squid);
    if (rc == VMMC_ERR_UNSUPPORTED) {
        printf("spawn: unsupported here: %s\n", vmmc_ErrorStr(rc));
        return 0;
    }
    if (rc != VMMC_ERR_SPAWN) {
        fprintf(stderr, "spawn: FAILED: a missing program gave %d\n", rc);
        return 1;
    }
    if (vmmc_Spawn(NULL, argv[0], NULL, NULL, NULL) != VMMC_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "spawn: FAILED: a NULL host was accepted\n");
        return 1;
    }
    const char *args[] = {"child", NULL};
    must(vmmc_Spawn(first, argv[0], args, &node, &squid), "vmmc_Spawn");
    wait_word(buf, 0xC0DE, "word from the child");
    send_word(node, squid, 7, 0xBEEF);
    printf("spawn parent: spawned %d:%d on %s: ok\n", node, squid, first);
    return 0;
}
