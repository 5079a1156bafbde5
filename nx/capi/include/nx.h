/*
 * nx.h - the C interface of shrimp-rs's NX/2 message passing (over VMMC).
 *
 * Link with -lnx; start the processes with the launcher: vmmc-run -n N -- ./program.
 * Node numbers are 0 .. numnodes()-1; one process per node, whose process type (ptype) is 0
 * until setptype().
 *
 * Message types: 0 .. 999,999,999, and the force types 1,073,741,824 .. 1,999,999,999.
 * Type selectors (typesel): -1 selects any type; a type selects that type only; any other
 * negative value selects every type except its one's complement (~typesel).
 * Node and process-type selectors (nodesel, ptypesel): -1 selects any.
 * Between one sender and one receiver, messages a receive could take are taken in the order
 * they were sent.
 *
 * An info array (the x calls) has 4 longs: type, count (the message's whole length), node,
 * ptype of the sender.
 *
 * Errors: as in NX, a call that fails prints the error and ends the process (exit status 1).
 * The underscore forms (_csend, _crecv, ...) return -1 and set errno to an EQ* code instead;
 * nx_strerror() describes it. A message longer than the receive buffer fills the buffer and is
 * an error (EQMSGLONG). A peer that dies makes the calls that wait for it fail (EQPEER).
 *
 * Settings (environment): NX_SMALL=du|du2|au (small-message path: deliberate update from the
 * user's memory, deliberate update after a copy, automatic update), NX_THRESHOLD=bytes
 * (largest message of the one-copy protocol; larger ones go zero-copy; by default 256 KiB,
 * less beyond 16 processes so that the packet buffers of all connections stay within 64 MiB,
 * never under 16 KiB), NX_SLOTS=n (packet buffers per connection, 16 by default),
 * NX_REGCACHE=1|0 (receive memory of zero-copy messages stays registered; on by default here),
 * NX_PULL=1|0 (receiver-assisted zero-copy, on by default: when a blocking receive takes a
 * message of 128 KiB or more, the sender writes the first half while the receiver reads the
 * second half from the sender's memory, so that both copy at once; 0 keeps the protocol of
 * the SHRIMP paper as it is).
 *
 * Handlers (hrecv, hrecvx, hsend, hsendx, hsendrecv) run on the thread of the NX call that
 * finds their message, or on the library's notification thread: one at a time, never nested,
 * held while masktrap(1) is in force. They may call NX (and post handler receives again).
 * A handler receive that fails (a message longer than its buffer: EQMSGLONG; a sender that
 * could not write the data) does not run its handler; the process's next call that waits or
 * polls (a blocking call that has to wait, msgwait, msgdone, iprobe, flick; a crecv whose
 * message is already there or a short csend that goes at once does not look) reports the
 * error: the plain forms print it and exit, the underscore forms return -1 with errno.
 *
 * Old programs: the declarations follow the Paragon's nx.h (void * buffers, long arguments,
 * void results where NX has them), so that programs written for it build unchanged, K&R C
 * included (gcc -std=gnu89): in C before C23, handler and gopf function parameters are
 * declared without a prototype, as NX declared them, so handlers defined K&R-style or with
 * int parameters are accepted; in C23 and C++, where () means (void), they are prototyped.
 * Fortran: the calls have Fortran bindings (mynode_, csend_, ...: arguments by reference,
 * INTEGER = 4 bytes, an info array of 4 INTEGERs, handlers called with their arguments by
 * reference, hwclock into 2 INTEGERs); link with -lnx. Not the ones that take C pointer
 * arrays or variable lists (nx_app_nodes, nx_loadve, nx_pspart, nx_initve_attr,
 * nx_mkpart_attr), restrictvol, and the underscore forms (not Fortran names).
 *
 * Process creation (on shared memory, as vmmc-run does it): a program started on its own,
 * not under the launcher, becomes the controlling process of an application with
 * nx_initve (size 0: "-sz N" on the command line, taken out of argv, or NX_DFLT_SIZE, or
 * the CPUs it may use) or nx_initve_rect; nx_nfork forks every node at once (0 in the
 * children, which are nodes from there on; the number of nodes in the parent), nx_load,
 * nx_loadve and load (node -1) start a program on every node; the controlling process holds
 * the job's rendezvous and nx_waitall waits for the nodes. The controlling process is not a
 * node: a message-passing call there makes it a job of one node of its own.
 *
 * What cannot exist on Linux returns -1 with errno EQNOTSUP (killproc and killcube, which
 * return nothing, print why and exit); nx_perror() prints the reason:
 * - adding processes to a running job: nx_initve, nx_nfork, nx_load ... in a process that
 *   is a node (started by vmmc-run) need the multi-host job spawn, which does not exist
 *   yet; a node list other than all the nodes in order (a job's nodes start together);
 *   nx_waitall with no job started; nx_initve_attr (its attributes are partition settings).
 * - partition management: nx_mkpart, nx_mkpart_rect, nx_mkpart_map, nx_mkpart_attr,
 *   nx_rmpart, nx_chpart_epl, nx_chpart_mod, nx_chpart_name, nx_chpart_owner, nx_chpart_rq,
 *   nx_chpart_sched, nx_pspart, nx_pri: Linux has no partitions of nodes nor gang scheduling.
 * - killproc and killcube of another node's process: a process does not know the others'
 *   process ids on every transport (the launcher ends a job); a node may kill itself.
 * - nx_app_nodes of another application than this job (pid other than 0 or getpid()).
 * - restrictvol: there is no parallel file system (the PFS calls are not provided).
 */
#ifndef NX_H
#define NX_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Handler and gopf function parameters: unprototyped before C23, as NX declared them. */
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 202311L)
#define NX_PARAMS(args) args
#else
#define NX_PARAMS(args) ()
#endif

/* errno values of the underscore calls */
#define EQTYPE 1       /* invalid message type or type selector */
#define EQNODE 2       /* invalid node */
#define EQPTYPE 3      /* invalid process type */
#define EQLEN 4        /* invalid length or NULL buffer */
#define EQMSGLONG 5    /* message longer than the receive buffer */
#define EQMID 6        /* invalid message id */
#define EQPEER 7       /* the peer node is gone */
#define EQNOTALLOWED 8 /* operation not allowed here */
#define EQCONFIG 9     /* bad setting in the environment */
#define EQVMMC 10      /* the communication layer failed (here or, for a receive, at its sender) */
#define EQNOTSUP 11    /* cannot be done on Linux or in this job (see above) */

#define INVALID_PTYPE -1
#define FORCE_TYPE 0x40000000 /* the first force type */
#define HWHZ 10000000         /* ticks per second of hwclock() */
#define HOST myhost()

/* hwclock()'s 64-bit tick count: slow the low 32 bits, shigh the high ones */
#ifndef _ESIZE_T
#define _ESIZE_T
typedef struct s_size {
    long slow;
    long shigh;
} esize_t;
#endif

typedef long *nx_nodes_t;             /* nx_app_nodes()'s list, malloc'ed: free() it */
typedef struct nx_pspart nx_pspart_t; /* nx_pspart() (partitions do not exist here) */

/* identity and small calls */
long mynode(void);
long numnodes(void);
long myptype(void);
void setptype(long ptype);
long myhost(void);   /* -1: the launcher is not a node */
long nodedim(void);  /* log2 of numnodes() rounded up */
void flick(void);    /* yields the processor (after progress: handlers run) */
void led(long on);   /* no LED here: does nothing */
double dclock(void); /* seconds */
const char *nx_strerror(long code);
const char *nx_version(void);
void nx_perror(const char *s); /* "s: " and the last NX error's text, on stderr */

/* sending */
void csend(long type, void *buf, long count, long node, long ptype);
long isend(long type, void *buf, long count, long node, long ptype);
/* To each node of nodes[0 .. nnodes-1], to the process of this process's type there. */
void gsendx(long type, void *buf, long count, long nodes[], long nnodes);
/* Returns at once; handler(type, count, node, ptype) runs when the send is complete (the
 * buffer stays unchanged until then). */
void hsend(long type, void *buf, long count, long node, long ptype,
           void (*handler) NX_PARAMS((long type, long count, long node, long ptype)));
void hsendx(long type, void *buf, long count, long node, long ptype,
            void (*handler) NX_PARAMS((long type, long count, long node, long ptype,
                                       long hparam)),
            long hparam);

/* receiving */
void crecv(long typesel, void *buf, long count);
void crecvx(long typesel, void *buf, long count, long nodesel, long ptypesel, long info[]);
long irecv(long typesel, void *buf, long count);
long irecvx(long typesel, void *buf, long count, long nodesel, long ptypesel, long info[]);
void hrecv(long typesel, void *buf, long count,
           void (*handler) NX_PARAMS((long type, long count, long node, long ptype)));
void hrecvx(long typesel, void *buf, long count, long nodesel, long ptypesel,
            void (*handler) NX_PARAMS((long type, long count, long node, long ptype,
                                       long hparam)),
            long hparam);
long masktrap(long state); /* 1 masks handlers (they wait), 0 unmasks; returns the old state */
/* Discards the arrived messages the selectors take (the info calls keep their values). */
void flushmsg(long typesel, long nodesel, long ptypesel);

/* send and receive the reply (of a type typesel selects, from any node) */
long csendrecv(long type, void *sbuf, long scount, long node, long ptype, long typesel,
               void *rbuf, long rcount); /* the reply's length */
/* One id for both: msgwait waits for the send and the reply (its info is left). */
long isendrecv(long type, void *sbuf, long scount, long node, long ptype, long typesel,
               void *rbuf, long rcount);
/* Returns at once; the reply goes to rbuf, then handler(type, count, node, ptype) of the
 * reply runs (sbuf stays unchanged until then). */
void hsendrecv(long type, void *sbuf, long scount, long node, long ptype, long typesel,
               void *rbuf, long rcount,
               void (*handler) NX_PARAMS((long type, long count, long node, long ptype)));

/* requests */
void msgwait(long mid);
long msgdone(long mid); /* 1: complete (the id is released), 0: not yet */
void msgcancel(long mid);
void msgignore(long mid);
/* One id standing for both (either may be merged already, or -1 for none): msgwait,
 * msgdone, msgcancel and msgignore act on every request it stands for. */
long msgmerge(long mid1, long mid2);

/* probes and info of the last message received or probed */
void cprobe(long typesel);
void cprobex(long typesel, long nodesel, long ptypesel, long info[]);
long iprobe(long typesel);
long iprobex(long typesel, long nodesel, long ptypesel, long info[]);
long infocount(void);
long infonode(void);
long infotype(void);
long infoptype(void);

/* global operations: every node calls them in the same order; results are combined in node
 * order (node 0's value first), so they equal the sequential result. work is not used.
 * gland, glor, glxor: nonzero is true, every element becomes 1 or 0. */
void gsync(void);
void gdsum(double x[], long n, double work[]);
void gssum(float x[], long n, float work[]);
void gisum(long x[], long n, long work[]);
void gsprod(float x[], long n, float work[]);
void gshigh(float x[], long n, float work[]);
void gslow(float x[], long n, float work[]);
void gdprod(double x[], long n, double work[]);
void giprod(long x[], long n, long work[]);
void gdhigh(double x[], long n, double work[]);
void gdlow(double x[], long n, double work[]);
void gihigh(long x[], long n, long work[]);
void gilow(long x[], long n, long work[]);
void giand(long x[], long n, long work[]);
void gior(long x[], long n, long work[]);
void gixor(long x[], long n, long work[]);
void gland(long x[], long n, long work[]);
void glor(long x[], long n, long work[]);
void glxor(long x[], long n, long work[]);
void gcol(void *x, long xlen, void *y, long ylen, long *ncnt);
void gcolx(void *x, long xlens[], void *y);
/* f(x, y) folds y into x */
void gopf(void *x, long xlen, void *work, long (*f) NX_PARAMS((void *x, void *y)));

/* application, process creation and partition (see above; these return -1 and errno) */
long nx_app_nodes(pid_t pid, nx_nodes_t *list, unsigned long *size); /* this job: 0 .. n-1 */
long nx_app_rect(long *rows, long *cols); /* 1 row of numnodes() */
long nx_initve(char *partition, long size, char *account, int *argc, char **argv);
long nx_initve_rect(char *partition, long anchor, long rows, long cols, char *account,
                    int *argc, char **argv);
long nx_initve_attr(char *partition, int *argc, char **argv, ...);
long nx_nfork(long nodes[], long nnodes, long ptype, long pids[]);
long nx_load(long nodes[], long nnodes, long ptype, long pids[], char *pathname);
long nx_loadve(long nodes[], long nnodes, long ptype, long pids[], char *pathname,
               char **argv, char **envp);
long nx_waitall(void);
long nx_mkpart(char *partition, long size, long sched);
long nx_mkpart_rect(char *partition, long rows, long cols, long sched);
long nx_mkpart_map(char *partition, long nnodes, long nodes[], long sched);
long nx_mkpart_attr(char *partition, ...);
long nx_rmpart(char *partition, long force, long recursive);
long nx_chpart_epl(char *partition, long epl);
long nx_chpart_mod(char *partition, long mode);
long nx_chpart_name(char *partition, char *name);
long nx_chpart_owner(char *partition, long owner, long group);
long nx_chpart_rq(char *partition, long rq);
long nx_chpart_sched(char *partition, long sched);
int nx_pspart(char *partition, nx_pspart_t **info, unsigned long *count);
long nx_pri(long pgroup, long priority);

/* iPSC and Touchstone DELTA compatibility */
unsigned long mclock(void); /* milliseconds */
void hwclock(esize_t *t);   /* ticks of HWHZ */
long mypid(void);           /* the process type */
long infopid(void);         /* infoptype() */
long gray(long i);          /* the gray code of i */
long ginv(long g);          /* the i whose gray code is g */
long mypart(long *rows, long *cols); /* 1 row of numnodes(); returns numnodes() */
void killcube(long node, long ptype); /* this node's own process only */
void killproc(long node, long ptype); /* this node's own process only */
long load(char *pathname, long node, long ptype); /* node -1: nx_load; -1 and errno */
long restrictvol(int fd, int nvol, int *vols);    /* no PFS: EQNOTSUP */

/* The underscore forms: -1 and errno (an EQ* code) instead of printing the error and
 * exiting. Where the plain form returns nothing they return 0 (_flushmsg: the number of
 * messages discarded; _hrecv, _hrecvx: the receive's id, for msgcancel). */
long _mynode(void);
long _numnodes(void);
long _myptype(void);
long _setptype(long ptype);
long _myhost(void);
long _nodedim(void);
long _flick(void);
long _led(long on);
double _dclock(void);
long _csend(long type, void *buf, long count, long node, long ptype);
long _isend(long type, void *buf, long count, long node, long ptype);
long _gsendx(long type, void *buf, long count, long nodes[], long nnodes);
long _hsend(long type, void *buf, long count, long node, long ptype,
            void (*handler) NX_PARAMS((long type, long count, long node, long ptype)));
long _hsendx(long type, void *buf, long count, long node, long ptype,
             void (*handler) NX_PARAMS((long type, long count, long node, long ptype,
                                        long hparam)),
             long hparam);
long _crecv(long typesel, void *buf, long count);
long _crecvx(long typesel, void *buf, long count, long nodesel, long ptypesel, long info[]);
long _irecv(long typesel, void *buf, long count);
long _irecvx(long typesel, void *buf, long count, long nodesel, long ptypesel, long info[]);
long _hrecv(long typesel, void *buf, long count,
            void (*handler) NX_PARAMS((long type, long count, long node, long ptype)));
long _hrecvx(long typesel, void *buf, long count, long nodesel, long ptypesel,
             void (*handler) NX_PARAMS((long type, long count, long node, long ptype,
                                        long hparam)),
             long hparam);
long _masktrap(long state);
long _flushmsg(long typesel, long nodesel, long ptypesel);
long _csendrecv(long type, void *sbuf, long scount, long node, long ptype, long typesel,
                void *rbuf, long rcount);
long _isendrecv(long type, void *sbuf, long scount, long node, long ptype, long typesel,
                void *rbuf, long rcount);
long _hsendrecv(long type, void *sbuf, long scount, long node, long ptype, long typesel,
                void *rbuf, long rcount,
                void (*handler) NX_PARAMS((long type, long count, long node, long ptype)));
long _msgwait(long mid); /* the received length (0 for a send) */
long _msgdone(long mid);
long _msgcancel(long mid);
long _msgignore(long mid);
long _msgmerge(long mid1, long mid2);
long _cprobe(long typesel);
long _cprobex(long typesel, long nodesel, long ptypesel, long info[]);
long _iprobe(long typesel);
long _iprobex(long typesel, long nodesel, long ptypesel, long info[]);
long _infocount(void);
long _infonode(void);
long _infotype(void);
long _infoptype(void);
long _gsync(void);
long _gdsum(double x[], long n, double work[]);
long _gssum(float x[], long n, float work[]);
long _gisum(long x[], long n, long work[]);
long _gsprod(float x[], long n, float work[]);
long _gshigh(float x[], long n, float work[]);
long _gslow(float x[], long n, float work[]);
long _gdprod(double x[], long n, double work[]);
long _giprod(long x[], long n, long work[]);
long _gdhigh(double x[], long n, double work[]);
long _gdlow(double x[], long n, double work[]);
long _gihigh(long x[], long n, long work[]);
long _gilow(long x[], long n, long work[]);
long _giand(long x[], long n, long work[]);
long _gior(long x[], long n, long work[]);
long _gixor(long x[], long n, long work[]);
long _gland(long x[], long n, long work[]);
long _glor(long x[], long n, long work[]);
long _glxor(long x[], long n, long work[]);
long _gcol(void *x, long xlen, void *y, long ylen, long *ncnt);
long _gcolx(void *x, long xlens[], void *y);
long _gopf(void *x, long xlen, void *work, long (*f) NX_PARAMS((void *x, void *y)));
unsigned long _mclock(void);
void _hwclock(esize_t *t);
long _infopid(void);
long _gray(long i);
long _ginv(long g);
int _killcube(long node, long ptype);
int _killproc(long node, long ptype);
long _load(char *pathname, long node, long ptype);
long _restrictvol(int fd, int nvol, int *vols);

#ifdef __cplusplus
}
#endif

#endif
