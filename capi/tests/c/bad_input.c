/* Bad input at every call of vmmc.h: NULL pointers, negative sizes and counts, unknown nodes,
 * squids, buffer ids, requests and handles. Each must return its documented negative code
 * (never crash the process). Run as a job of one; prints "bad_input: ok" and exits 0, or
 * names the first call that misbehaved and exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vmmc.h"

static int failures = 0;

#define EXPECT(call, want)                                                              \
    do {                                                                                \
        int got_ = (call);                                                              \
        if (got_ != (want)) {                                                           \
            fprintf(stderr, "bad_input: %s returned %d, want %d (%s)\n", #call, got_,   \
                    (int)(want), vmmc_ErrorStr(want));                                  \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

#define EXPECT_NEG(call)                                                                \
    do {                                                                                \
        int got_ = (call);                                                              \
        if (got_ >= 0) {                                                                \
            fprintf(stderr, "bad_input: %s returned %d, want a negative code\n", #call, \
                    got_);                                                              \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

static void handler(void *addr, uint32_t value) {
    (void)addr;
    (void)value;
}

int main(void) {
    const int node = vmmc_MyNode(), squid = vmmc_GetSquid();
    char name[64];
    void *dest = NULL;
    size_t len = 0, off = 0;
    int req = 0, handle = 0;
    uint32_t words[4] = {1, 2, 3, 4};

    /* identity */
    EXPECT(vmmc_RankToProc(-1, &req, &handle), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_RankToProc(1 << 30, &req, &handle), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_RankToProc(0, NULL, NULL), 0); /* documented: NULL allowed */
    EXPECT(vmmc_Parent(NULL, NULL), 0); /* documented: NULL allowed */
    EXPECT_NEG(vmmc_MyHostName(NULL, 5));
    EXPECT_NEG(vmmc_MyHostName(name, -1));
    EXPECT_NEG(vmmc_AllHosts(NULL, 5));
    EXPECT_NEG(vmmc_AllHosts(name, -7));
    EXPECT_NEG(vmmc_NodeToName(-1, name, sizeof name));
    EXPECT_NEG(vmmc_NodeToName(node + 1000, name, sizeof name));
    EXPECT_NEG(vmmc_NodeToName(node, NULL, 10));
    EXPECT_NEG(vmmc_NodeToName(node, name, -3));
    EXPECT(vmmc_NameToNode(NULL), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_NameToNode("no-such-host.invalid"), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_NameToNode(""), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_EqualNode(-1, -1), 1);

    /* memory */
    if (vmmc_AllocRecvBuf(0) != NULL) {
        fprintf(stderr, "bad_input: vmmc_AllocRecvBuf(0) returned memory\n");
        failures++;
    }
    if (vmmc_AllocRecvBuf((size_t)-1) != NULL) {
        fprintf(stderr, "bad_input: vmmc_AllocRecvBuf(SIZE_MAX) returned memory\n");
        failures++;
    }
    EXPECT_NEG(vmmc_FreeRecvBuf(NULL));
    EXPECT_NEG(vmmc_FreeRecvBuf(words));

    /* export */
    void *rb = vmmc_AllocRecvBuf(4096);
    if (rb == NULL) {
        fprintf(stderr, "bad_input: vmmc_AllocRecvBuf(4096) failed\n");
        return 1;
    }
    int pair[2] = {node, squid};
    EXPECT(vmmc_ExportRecvBuf(1, NULL, 4096, NULL, NULL, 0, 0), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_ExportRecvBuf(1, rb, 0, NULL, NULL, 0, 0), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT_NEG(vmmc_ExportRecvBuf(1, rb, (size_t)-4, NULL, NULL, 0, 0));
    EXPECT(vmmc_ExportRecvBuf(1, rb, 4096, NULL, NULL, -1, 0), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_ExportRecvBuf(1, rb, 4096, NULL, NULL, 2, 0), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT_NEG(vmmc_ExportRecvBuf(1, rb, 4096, NULL, pair, 1 << 30, 0));
    EXPECT(vmmc_ExportRecvBuf(0xFFFFFFFFu, rb, 4096, NULL, NULL, 0, 0),
           VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_UnexportRecvBuf(77), VMMC_ERR_NO_SUCH_BUFFER);
    EXPECT(vmmc_ExportRecvBuf(1, rb, 4096, handler, pair, 1, 1), 0);
    EXPECT(vmmc_ExportRecvBuf(1, rb, 4096, NULL, NULL, 0, 0), VMMC_ERR_BUFID_IN_USE);
    EXPECT(vmmc_ExportRecvBuf(2, rb, 4096, NULL, NULL, 0, 0), VMMC_ERR_OVERLAP);

    /* import */
    EXPECT(vmmc_ImportRecvBuf(-1, squid, 1, &dest, &len), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_ImportRecvBuf(node, -1, 1, &dest, &len), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_ImportRecvBuf(node + 1000, squid, 1, &dest, &len), VMMC_ERR_PEER_LOST);
    EXPECT(vmmc_ImportRecvBuf(node, squid + 1000, 1, &dest, &len), VMMC_ERR_PEER_LOST);
    EXPECT(vmmc_ImportRecvBuf(node, squid, 1, NULL, &len), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_ImportRecvBufAsync(node, squid, 1, NULL), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_ImportRecvBufAsync(-5, -5, 1, &req), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT_NEG(vmmc_ImportRecvBufStatus(-1, &dest, &len));
    EXPECT_NEG(vmmc_ImportRecvBufStatus(123456, &dest, &len));
    EXPECT(vmmc_ImportRecvBufAsync(node, squid, 1, &req), 0);
    EXPECT(vmmc_ImportRecvBufStatus(req, NULL, &len), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT_NEG(vmmc_UnimportRecvBuf(NULL));
    EXPECT_NEG(vmmc_UnimportRecvBuf(words));
    EXPECT(vmmc_ImportRecvBuf(node, squid, 1, &dest, NULL), 0);

    /* deliberate update and remote read */
    EXPECT(vmmc_SendData(NULL, words, 1), VMMC_ERR_NOT_IMPORTED);
    EXPECT(vmmc_SendData(words, words, 1), VMMC_ERR_NOT_IMPORTED);
    EXPECT(vmmc_SendData(dest, NULL, 1), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_SendData(dest, words, 0), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT_NEG(vmmc_SendData(dest, words, (size_t)-1));
    EXPECT_NEG(vmmc_SendData(dest, words, (size_t)1 << 62));
    EXPECT(vmmc_SendData(dest, words, 2048), VMMC_ERR_OUT_OF_BOUNDS);
    EXPECT(vmmc_SendData((char *)dest + 4094, words, 1), VMMC_ERR_UNALIGNED);
    EXPECT_NEG(vmmc_SendData((char *)dest + 4096, words, 1));
    EXPECT(vmmc_SendDataNotify(NULL, words, 1), VMMC_ERR_NOT_IMPORTED);
    EXPECT(vmmc_SendDataNotify(dest, NULL, 1), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_SendDataAsync(dest, words, 1, NULL), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_SendDataAsync(dest, NULL, 1, &handle), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_SendDataAsyncNotify(NULL, words, 1, &handle), VMMC_ERR_NOT_IMPORTED);
    EXPECT_NEG(vmmc_AsyncStatus(-1));
    EXPECT_NEG(vmmc_AsyncStatus(987654));
    EXPECT(vmmc_GetData(NULL, dest, 1), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_GetData(words, NULL, 1), VMMC_ERR_NOT_IMPORTED);
    EXPECT(vmmc_GetData(words, dest, 0), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT_NEG(vmmc_GetData(words, dest, (size_t)-1));
    EXPECT(vmmc_GetDataAsync(words, dest, 1, NULL), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT(vmmc_GetDataAsync(NULL, dest, 1, &handle), VMMC_ERR_INVALID_ARGUMENT);

    /* notifications */
    EXPECT(vmmc_UnblockNotifications(), 1); /* documented: unblocked already, positive */

    /* redirection */
    EXPECT(vmmc_PostRedir(77, words, sizeof words, 0, 4), VMMC_ERR_NO_SUCH_BUFFER);
    EXPECT(vmmc_PostRedir(1, NULL, 16, 0, 4), VMMC_ERR_INVALID_ARGUMENT);
    EXPECT_NEG(vmmc_PostRedir(1, words, sizeof words, 0, 1 << 20));
    EXPECT_NEG(vmmc_PostRedir(1, words, sizeof words, (size_t)-4, 4));
    EXPECT(vmmc_EndRedir(77, &off, &len), VMMC_ERR_NO_SUCH_BUFFER);
    EXPECT(vmmc_DataEnd(77, &off), VMMC_ERR_NO_SUCH_BUFFER);
    EXPECT(vmmc_DataEnd(1, NULL), 0); /* documented: NULL allowed; nothing arrived */
    EXPECT(vmmc_ClearDataEnd(77), VMMC_ERR_NO_SUCH_BUFFER);

    /* errors */
    if (vmmc_ErrorStr(-100000) == NULL || vmmc_ErrorStr(0x7fffffff) == NULL) {
        fprintf(stderr, "bad_input: vmmc_ErrorStr returned NULL\n");
        failures++;
    }
    vmmc_Error(-3, NULL);

    /* The job still works after all that. */
    EXPECT(vmmc_SendData(dest, words, 4), 0);
    if (((uint32_t *)rb)[3] != 4) {
        fprintf(stderr, "bad_input: the valid send did not land\n");
        failures++;
    }
    EXPECT(vmmc_UnimportRecvBuf(dest), 0);
    EXPECT(vmmc_UnimportRecvBuf(dest), VMMC_ERR_NOT_IMPORTED);
    EXPECT(vmmc_UnexportRecvBuf(1), 0);
    EXPECT(vmmc_Finalize(), 0);
    EXPECT(vmmc_ExportRecvBuf(1, rb, 4096, NULL, NULL, 0, 0), VMMC_ERR_BOOTSTRAP);
    EXPECT(vmmc_SendData(dest, words, 1), VMMC_ERR_BOOTSTRAP);
    if (failures) {
        fprintf(stderr, "bad_input: %d calls misbehaved\n", failures);
        return 1;
    }
    printf("bad_input: ok\n");
    return 0;
}
