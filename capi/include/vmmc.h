/*
 * vmmc.h - the C interface of shrimp-rs's VMMC (virtual memory-mapped communication).
 *
 * The calls of the VMMC 1.0 user's guide (vmmc_*), a few additions (vmmc_MyRank,
 * vmmc_JobSize, vmmc_RankToProc, vmmc_AllocRecvBuf, vmmc_FreeRecvBuf, vmmc_Finalize), and the
 * names of the SHRIMP Base Library (SBL_*) as aliases. Link with -lvmmc; start the processes
 * with the launcher: vmmc-run -n N -- ./program.
 *
 * Conventions
 * - The process joins its job on the first call that needs it (a job of one without the
 *   launcher). If joining fails, such calls return the error (VMMC_ERR_BOOTSTRAP, ...).
 * - Calls return 0 (or a non-negative value where stated) on success and a negative
 *   VMMC_ERR_* code on failure; vmmc_ErrorStr() describes a code, vmmc_Error() prints it.
 * - Transfers are in VMMC words (vmmc_WordSize() bytes); offsets must be word multiples.
 * - A DestSpace address returned by an import is the base of the proxy: dest + k addresses
 *   byte k of the remote receive buffer. DestSpace has no memory behind it: never
 *   dereference it, pass it to vmmc_SendData* / vmmc_GetData*.
 * - Notification handlers run on a library thread (or in vmmc_UnblockNotifications), one at a
 *   time, with notifications blocked. They should not block or spin, and must not call
 *   vmmc_Finalize.
 * - After vmmc_Finalize, every call that needs the job returns VMMC_ERR_BOOTSTRAP; the
 *   process cannot rejoin. vmmc_Finalize also runs at exit() when the program did not call it.
 */
#ifndef VMMC_H
#define VMMC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ----- error codes (vmmc::Error::code) ----- */

#define VMMC_ERR_INVALID_ARGUMENT     (-1)  /* malformed argument (NULL, zero length, bad id) */
#define VMMC_ERR_UNALIGNED            (-2)  /* offset or length not a multiple of the word size */
#define VMMC_ERR_BUFID_IN_USE         (-3)  /* buffer id already exported by this process */
#define VMMC_ERR_OVERLAP              (-4)  /* receive buffers would overlap */
#define VMMC_ERR_NO_SUCH_BUFFER       (-5)  /* no exported buffer with that id */
#define VMMC_ERR_PERMISSION           (-6)  /* importer not in the exporter's list */
#define VMMC_ERR_OUT_OF_BOUNDS        (-7)  /* transfer outside the buffer; nothing written */
#define VMMC_ERR_UNEXPORTED           (-8)  /* the exporter unexported the buffer */
#define VMMC_ERR_NOT_IMPORTED         (-9)  /* unimported proxy or address outside DestSpace */
#define VMMC_ERR_PEER_LOST            (-10) /* the peer process exited or was killed */
#define VMMC_ERR_NOTIFY_OVERFLOW      (-11) /* notifications lost while blocked */
#define VMMC_ERR_UNBLOCK_IN_HANDLER   (-12) /* unconditional unblock inside a handler */
#define VMMC_ERR_WOULD_BLOCK          (-13) /* queue full: retry after progress */
#define VMMC_ERR_NOT_REDIRECTABLE     (-14) /* buffer not exported as redirectable */
#define VMMC_ERR_REDIR_POSTED         (-15) /* a redirection is already posted */
#define VMMC_ERR_UNSUPPORTED          (-16) /* not supported by this transport */
#define VMMC_ERR_BOOTSTRAP            (-17) /* cannot join the job, or after vmmc_Finalize */
#define VMMC_ERR_PROTOCOL             (-18) /* malformed message from a peer */
#define VMMC_ERR_SYSTEM               (-19) /* a system call failed */
#define VMMC_ERR_SPAWN                (-20) /* spawn failed: unknown host, no such program */

/* ----- identity ----- */

/* Node id of the calling process. */
int vmmc_MyNode(void);
/* Squid (process id unique on its node, never recycled) of the calling process. */
int vmmc_GetSquid(void);
/* Rank of the calling process in its job, 0..vmmc_JobSize()-1. */
int vmmc_MyRank(void);
/* Number of processes in the job. */
int vmmc_JobSize(void);
/* Node and squid of the VMMC process that started this one; both -1 when there is none.
 * NULL pointers are allowed. */
int vmmc_Parent(int *node, int *squid);
/* Node and squid of the process of rank `rank` (pass them to vmmc_ImportRecvBuf). NULL
 * pointers are allowed. */
int vmmc_RankToProc(int rank, int *node, int *squid);
/* VMMC page size in bytes. */
int vmmc_PageSize(void);
/* VMMC word size in bytes (4). */
int vmmc_WordSize(void);
/* Library version, a static string. */
const char *vmmc_Version(void);
/* Host name of this node, NUL-terminated, into buf[0..len]. Returns its length (without the
 * NUL); VMMC_ERR_OUT_OF_BOUNDS with a truncated string when it does not fit. buf == NULL with
 * len == 0 returns the length only. */
int vmmc_MyHostName(char *buf, int len);
/* Host names of all nodes, by node id, separated by newlines; as vmmc_MyHostName. */
int vmmc_AllHosts(char *buf, int len);
/* Host name of `node`; as vmmc_MyHostName. */
int vmmc_NodeToName(int node, char *buf, int len);
/* Node id of a host name; VMMC_ERR_INVALID_ARGUMENT when unknown. */
int vmmc_NameToNode(const char *name);
/* 1 if a and b are the same node, 0 otherwise. */
int vmmc_EqualNode(int a, int b);

/* ----- sessions and spawning ----- */

/* Host names of this session, separated by newlines; as vmmc_MyHostName. The session is the
 * hosts the job was started on: those of `vmmc-run --hosts H1,H2,...`, else this host.
 * Windows NT's session administration (VMMCSVR, CFGVMMC: a session name, user and password,
 * a drive letter, a network share, an output logging directory) has no counterpart on
 * Linux: a process sees the file systems of its host, its output goes to the launcher, and
 * processes on other hosts are started by the site's remote-shell agent (ssh, or
 * --rsh / VMMC_RSH), never by a daemon of ours. */
int vmmc_SessionHosts(char *buf, int len);
/* Starts `program` (a path, or a name looked up in PATH) with the arguments argv (a
 * NULL-terminated array without the program name; NULL for none) on `host`, one of
 * vmmc_SessionHosts() or "localhost", as a new process of this job. Returns 0 once the new
 * process has joined, with its node and squid in *node and *squid (NULL pointers allowed):
 * it has a new squid, its vmmc_Parent() is the caller, and it imports and exports like any
 * process of the job (its rank is beyond the ranks vmmc-run started, and its vmmc_JobSize()
 * counts the processes up to it; theirs do not change). The launcher starts it, on another
 * host through the remote-shell agent. Over tcp a job grows by up to 256 processes; over shm
 * by the slots `vmmc-run --spawn-slots K` reserved (a failed spawn uses one too).
 * VMMC_ERR_SPAWN for an unknown host, a program that cannot start, a process that ended
 * before joining, or no slot left; VMMC_ERR_UNSUPPORTED where nobody can start a process
 * (sim, mpi, or a job not started by vmmc-run). */
int vmmc_Spawn(const char *host, const char *program, const char *const *argv, int *node,
               int *squid);

/* ----- receive-buffer memory ----- */

/* `len` zeroed bytes of shared memory, page-aligned, for a receive buffer: importers on the
 * same host write it at user level (other memory is written with a system call per send).
 * NULL on failure. */
void *vmmc_AllocRecvBuf(size_t len);
/* Frees memory from vmmc_AllocRecvBuf. Memory still exported (or posted as a redirection
 * destination) stays mapped until it is unexported. */
int vmmc_FreeRecvBuf(void *addr);

/* ----- export side ----- */

/* A notification handler: the address of the last word of the message that carried the
 * notification (export address + offset) and that word's value as delivered. */
typedef void (*vmmc_handler_t)(void *last_word_addr, uint32_t value);

/* Exports addr[0..len] as receive buffer `bufid` (unique among this process's exports;
 * buffers may not overlap). `handler` may be NULL. `importers` lists who may import, as
 * n_importers pairs (node, squid); n_importers == 0 means anyone. `redirectable` != 0 allows
 * vmmc_PostRedir. The memory must stay valid until vmmc_UnexportRecvBuf. */
int vmmc_ExportRecvBuf(uint32_t bufid, void *addr, size_t len, vmmc_handler_t handler,
                       const int *importers, int n_importers, int redirectable);
/* Unexports `bufid`: every link is broken, data in flight has landed, importers' later sends
 * fail with VMMC_ERR_UNEXPORTED. */
int vmmc_UnexportRecvBuf(uint32_t bufid);

/* ----- import side ----- */

/* Imports buffer `bufid` of process (node, squid), waiting until it is exported. Sets
 * *dest_addr to the proxy's DestSpace address and *len (may be NULL) to its size in bytes. */
int vmmc_ImportRecvBuf(int node, int squid, uint32_t bufid, void **dest_addr, size_t *len);
/* Starts an import and returns at once; *req identifies it. */
int vmmc_ImportRecvBufAsync(int node, int squid, uint32_t bufid, int *req);
/* Status of an import request: 1 when done (*dest_addr and *len set, request freed), 0 while
 * the buffer is not exported yet, negative on error (request freed). */
int vmmc_ImportRecvBufStatus(int req, void **dest_addr, size_t *len);
/* Releases the proxy whose base is dest_addr; later sends through it fail. */
int vmmc_UnimportRecvBuf(void *dest_addr);

/* ----- deliberate update and remote read ----- */

/* Sends nwords words from local memory `src` to DestSpace address `dest`; returns when the
 * data has left (src may be reused). Reliable and in order per receiver. */
int vmmc_SendData(void *dest, const void *src, size_t nwords);
/* As vmmc_SendData, and runs the buffer's handler at the receiver after the data landed. */
int vmmc_SendDataNotify(void *dest, const void *src, size_t nwords);
/* Starts a send; *handle is for vmmc_AsyncStatus. */
int vmmc_SendDataAsync(void *dest, const void *src, size_t nwords, int *handle);
/* Starts a send with notification. */
int vmmc_SendDataAsyncNotify(void *dest, const void *src, size_t nwords, int *handle);
/* Status of an asynchronous send or read: 1 when done (handle freed; a read's data is in its
 * destination), 0 while pending, negative on error (handle freed). */
int vmmc_AsyncStatus(int handle);
/* Reads nwords words at DestSpace address `src` (an imported buffer) into local `dst`. */
int vmmc_GetData(void *dst, const void *src, size_t nwords);
/* Starts a remote read; `dst` must stay valid until vmmc_AsyncStatus reports done. */
int vmmc_GetDataAsync(void *dst, const void *src, size_t nwords, int *handle);

/* ----- notifications ----- */

/* Blocks notifications for the whole process (they queue); calls nest. */
int vmmc_BlockNotifications(void);
/* Conditionally unblocks: 1 when notifications are unblocked (queued ones delivered first),
 * 0 when still nested, VMMC_ERR_NOTIFY_OVERFLOW if some were lost while blocked,
 * VMMC_ERR_UNBLOCK_IN_HANDLER for an unconditional unblock inside a handler. */
int vmmc_UnblockNotifications(void);

/* ----- transfer redirection ----- */

/* Data arriving for redirectable buffer `bufid` at offsets buf_offset..buf_offset+len goes
 * to dest[0..len] instead (len <= dest_len). Used by one message, then cancelled; dest must
 * stay valid until vmmc_EndRedir. */
int vmmc_PostRedir(uint32_t bufid, void *dest, size_t dest_len, size_t buf_offset, size_t len);
/* Ends the redirection on `bufid` and reports what went to the destination: buffer offsets
 * *buf_offset..*buf_offset+*len (*len == 0: nothing). NULL pointers are allowed. */
int vmmc_EndRedir(uint32_t bufid, size_t *buf_offset, size_t *len);
/* 1 and *offset = offset of the last word of the last message into `bufid`, or 0 when none
 * arrived since the last vmmc_ClearDataEnd. `offset` may be NULL. */
int vmmc_DataEnd(uint32_t bufid, size_t *offset);
/* Clears the end-of-data word of `bufid`. */
int vmmc_ClearDataEnd(uint32_t bufid);

/* ----- errors and the end ----- */

/* A static string describing an error code ("no error" for 0 and positive values). */
const char *vmmc_ErrorStr(int code);
/* Prints "msg: description of code" on stderr. */
void vmmc_Error(int code, const char *msg);
/* Leaves the job cleanly: sends flushed, proxies unimported, buffers unexported, the
 * notification thread stopped. Memory from vmmc_AllocRecvBuf stays valid until freed. Later
 * calls that need the job return VMMC_ERR_BOOTSTRAP; a second vmmc_Finalize returns 0.
 * Inside a notification handler it does nothing and returns VMMC_ERR_INVALID_ARGUMENT. */
int vmmc_Finalize(void);

/* ----- SHRIMP Base Library names ----- */

#define SBL_ExportRecvBuf         vmmc_ExportRecvBuf
#define SBL_ImportRecvBuf         vmmc_ImportRecvBuf
#define SBL_ImportRecvBufReq      vmmc_ImportRecvBufAsync
#define SBL_UnexportRecvBuf       vmmc_UnexportRecvBuf
#define SBL_UnimportRecvBuf       vmmc_UnimportRecvBuf
#define SBL_SendMsg               vmmc_SendData
#define SBL_SendMesg              vmmc_SendData
#define SBL_SendMsgWithNotify     vmmc_SendDataNotify
#define SBL_BlockNotifications    vmmc_BlockNotifications
#define SBL_UnblockNotifications  vmmc_UnblockNotifications
#define SBL_PageSize              vmmc_PageSize
#define SBL_WordSize              vmmc_WordSize
#define SBL_Error                 vmmc_Error
#define SBL_Hosts                 vmmc_AllHosts

#ifdef __cplusplus
}
#endif

#endif /* VMMC_H */
