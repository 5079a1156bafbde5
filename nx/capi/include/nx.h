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
 * Handlers (hrecv, hrecvx) run on the thread of the NX call that finds their message, or on
 * the library's notification thread: one at a time, never nested. They may call NX.
 */
#ifndef NX_H
#define NX_H

#ifdef __cplusplus
extern "C" {
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
#define EQVMMC 10      /* the communication layer failed */

/* identity and small calls */
long mynode(void);
long numnodes(void);
long myptype(void);
long setptype(long ptype);
long myhost(void);   /* -1: the launcher is not a node */
long nodedim(void);  /* log2 of numnodes() rounded up */
void flick(void);    /* yields the processor */
void led(long on);   /* no LED here: does nothing */
double dclock(void); /* seconds */
const char *nx_strerror(long code);
const char *nx_version(void);

/* sending */
void csend(long type, const void *buf, long count, long node, long ptype);
long _csend(long type, const void *buf, long count, long node, long ptype);
long isend(long type, const void *buf, long count, long node, long ptype);
long _isend(long type, const void *buf, long count, long node, long ptype);

/* receiving */
void crecv(long typesel, void *buf, long count);
long _crecv(long typesel, void *buf, long count);
void crecvx(long typesel, void *buf, long count, long nodesel, long ptypesel, long info[]);
long _crecvx(long typesel, void *buf, long count, long nodesel, long ptypesel, long info[]);
long irecv(long typesel, void *buf, long count);
long _irecv(long typesel, void *buf, long count);
long irecvx(long typesel, void *buf, long count, long nodesel, long ptypesel, long info[]);
long _irecvx(long typesel, void *buf, long count, long nodesel, long ptypesel, long info[]);
long csendrecv(long type, const void *sbuf, long scount, long node, long ptype, long typesel,
               void *rbuf, long rcount);
long hrecv(long typesel, void *buf, long count,
           void (*handler)(long type, long count, long node, long ptype));
long hrecvx(long typesel, void *buf, long count, long nodesel, long ptypesel,
            void (*handler)(long type, long count, long node, long ptype, long hparam),
            long hparam);
long masktrap(long state); /* 1 masks handlers (they wait), 0 unmasks; returns the old state */

/* requests */
void msgwait(long mid);
long _msgwait(long mid); /* the received length (0 for a send) */
long msgdone(long mid);  /* 1: complete (the id is released), 0: not yet */
long _msgdone(long mid);
void msgcancel(long mid);
long _msgcancel(long mid);
void msgignore(long mid);

/* probes and info of the last message received or probed */
void cprobe(long typesel);
long _cprobe(long typesel);
void cprobex(long typesel, long nodesel, long ptypesel, long info[]);
long iprobe(long typesel);
long _iprobe(long typesel);
long iprobex(long typesel, long nodesel, long ptypesel, long info[]);
long infocount(void);
long infonode(void);
long infotype(void);
long infoptype(void);

/* global operations: every node calls them in the same order; results are combined in node
 * order (node 0's value first), so they equal the sequential result. work is not used. */
void gsync(void);
long _gsync(void);
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
void gcol(const void *x, long xlen, void *y, long ylen, long *ncnt);
void gcolx(const void *x, const long xlens[], void *y);
void gopf(void *x, long xlen, void *work, long (*f)(void *x, void *y));

#ifdef __cplusplus
}
#endif

#endif
