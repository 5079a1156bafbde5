/*
 * notify_pingpong.c - the C ABI end to end, as a job of 2: vmmc-run -n 2 -- ./notify_pingpong
 *
 * Rank 1 exports buffer 1 (from vmmc_AllocRecvBuf) with a notification handler. Rank 0
 * exports buffer 2 for the reply, imports rank 1's buffer 1 and sends 16 words with
 * notification, the last one 0xC0FFEE. Rank 1's handler records the value and the offset of
 * the last word; rank 1 checks them and the data, then replies into rank 0's buffer 2 with
 * the flag word last, and rank 0 waits for the flag and checks the reply. Both also check
 * errors of the ABI. Exit 0 on success; a message and exit 1 on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vmmc.h>

#define BUF_LEN 4096
#define NWORDS 16
#define MAGIC 0xC0FFEEu
#define REPLY_FLAG 0xD0D0CAFEu
#define TIMEOUT_S 10.0

static int rank = -1;

static volatile int seen;
static volatile uint32_t seen_value;
static volatile size_t seen_offset;
static char *rb_base;

static void fail(const char *what, int code)
{
    if (code < 0)
        fprintf(stderr, "notify_pingpong rank %d: FAILED: %s: %s (%d)\n", rank, what,
                vmmc_ErrorStr(code), code);
    else
        fprintf(stderr, "notify_pingpong rank %d: FAILED: %s (%d)\n", rank, what, code);
    exit(1);
}

static void check(int ok, const char *what, int code)
{
    if (!ok)
        fail(what, code);
}

static void must(int rc, const char *what)
{
    if (rc < 0)
        fail(what, rc);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pause_briefly(void)
{
    struct timespec ts = {0, 100000}; /* 100 us */
    nanosleep(&ts, NULL);
}

static void handler(void *last_word_addr, uint32_t value)
{
    seen_value = value;
    seen_offset = (size_t)((char *)last_word_addr - rb_base);
    __sync_synchronize();
    seen = 1;
}

static void proc_of_rank(int r, int *node, int *squid)
{
    must(vmmc_RankToProc(r, node, squid), "vmmc_RankToProc");
    check(*node >= 0 && *squid >= 0, "node and squid of a rank", *squid);
}

static void rank0(void)
{
    int node1, squid1, i, rc;
    uint32_t msg[NWORDS];
    uint32_t *reply;
    void *dest = NULL;
    size_t len = 0;
    double t0;

    /* The reply buffer, exported to rank 1 only, before importing (imports wait). */
    proc_of_rank(1, &node1, &squid1);
    reply = vmmc_AllocRecvBuf(BUF_LEN);
    check(reply != NULL, "vmmc_AllocRecvBuf", 0);
    {
        int only_rank1[2];
        only_rank1[0] = node1;
        only_rank1[1] = squid1;
        must(vmmc_ExportRecvBuf(2, reply, BUF_LEN, NULL, only_rank1, 1, 0),
             "vmmc_ExportRecvBuf(2)");
    }

    must(SBL_ImportRecvBuf(node1, squid1, 1, &dest, &len), "vmmc_ImportRecvBuf(rank 1, 1)");
    check(len == BUF_LEN, "imported length", (int)len);

    for (i = 0; i < NWORDS; i++)
        msg[i] = 1000u + (uint32_t)i;
    msg[NWORDS - 1] = MAGIC;
    must(vmmc_SendDataNotify(dest, msg, NWORDS), "vmmc_SendDataNotify");

    /* Out of bounds: two words at the last word of the buffer; nothing is written. */
    rc = vmmc_SendData((char *)dest + BUF_LEN - 4, msg, 2);
    check(rc == VMMC_ERR_OUT_OF_BOUNDS, "out-of-bounds send returns VMMC_ERR_OUT_OF_BOUNDS", rc);
    check(vmmc_ErrorStr(rc) != NULL && vmmc_ErrorStr(rc)[0] != '\0',
          "vmmc_ErrorStr(VMMC_ERR_OUT_OF_BOUNDS) is non-empty", rc);
    rc = vmmc_SendData((char *)dest + 2, msg, 1);
    check(rc == VMMC_ERR_UNALIGNED, "unaligned send returns VMMC_ERR_UNALIGNED", rc);

    /* Wait for the reply: rank 1 writes 16 words, the flag last. */
    t0 = now();
    while (((volatile uint32_t *)reply)[NWORDS - 1] != REPLY_FLAG) {
        if (now() - t0 > TIMEOUT_S)
            fail("no reply from rank 1 within 10 s", 0);
        pause_briefly();
    }
    __sync_synchronize();
    for (i = 0; i < NWORDS - 1; i++)
        check(reply[i] == 2000u + (uint32_t)i, "reply data", i);

    must(vmmc_UnimportRecvBuf(dest), "vmmc_UnimportRecvBuf");
    must(vmmc_UnexportRecvBuf(2), "vmmc_UnexportRecvBuf(2)");
    must(vmmc_FreeRecvBuf(reply), "vmmc_FreeRecvBuf");
}

static void rank1(void)
{
    int node0, squid0, i;
    uint32_t out[NWORDS];
    uint32_t *rb;
    void *dest = NULL;
    size_t len = 0;
    double t0;

    rb = vmmc_AllocRecvBuf(BUF_LEN);
    check(rb != NULL, "vmmc_AllocRecvBuf", 0);
    rb_base = (char *)rb;
    must(vmmc_ExportRecvBuf(1, rb, BUF_LEN, handler, NULL, 0, 0), "vmmc_ExportRecvBuf(1)");

    proc_of_rank(0, &node0, &squid0);
    must(vmmc_ImportRecvBuf(node0, squid0, 2, &dest, &len), "vmmc_ImportRecvBuf(rank 0, 2)");
    check(len == BUF_LEN, "imported length", (int)len);

    t0 = now();
    while (!seen) {
        if (now() - t0 > TIMEOUT_S)
            fail("no notification within 10 s", 0);
        pause_briefly();
    }
    __sync_synchronize();
    check(seen_value == MAGIC, "handler value == 0xC0FFEE", (int)seen_value);
    check(seen_offset == 60, "handler offset of the last word == 60", (int)seen_offset);
    for (i = 0; i < NWORDS - 1; i++)
        check(rb[i] == 1000u + (uint32_t)i, "received data", i);
    check(rb[NWORDS - 1] == MAGIC, "received last word", (int)rb[NWORDS - 1]);

    for (i = 0; i < NWORDS; i++)
        out[i] = 2000u + (uint32_t)i;
    out[NWORDS - 1] = REPLY_FLAG;
    must(SBL_SendMsg(dest, out, NWORDS), "vmmc_SendData(reply)");

    must(vmmc_UnimportRecvBuf(dest), "vmmc_UnimportRecvBuf");
    must(vmmc_UnexportRecvBuf(1), "vmmc_UnexportRecvBuf(1)");
    must(vmmc_FreeRecvBuf(rb), "vmmc_FreeRecvBuf");
}

int main(void)
{
    int size;
    char host[256];

    rank = vmmc_MyRank();
    must(rank, "vmmc_MyRank");
    size = vmmc_JobSize();
    must(size, "vmmc_JobSize");
    check(size == 2, "run as 2 ranks (vmmc-run -n 2)", size);
    check(SBL_WordSize() == 4, "word size", SBL_WordSize());
    check(SBL_PageSize() > 0, "page size", SBL_PageSize());
    must(vmmc_MyHostName(host, (int)sizeof host), "vmmc_MyHostName");
    check(vmmc_NameToNode(host) == vmmc_MyNode(), "vmmc_NameToNode(my host)", vmmc_MyNode());

    if (rank == 0)
        rank0();
    else
        rank1();

    must(vmmc_Finalize(), "vmmc_Finalize");
    check(vmmc_MyRank() == VMMC_ERR_BOOTSTRAP, "calls fail after vmmc_Finalize", vmmc_MyRank());
    printf("notify_pingpong rank %d: ok\n", rank);
    return 0;
}
