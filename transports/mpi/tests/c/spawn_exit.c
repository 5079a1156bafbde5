/* The mpi transport's exit after vmmc_Spawn, in C, against Open MPI 4.1 (not run by cargo:
 * it is the evidence for the order in which `finalize_at_exit` ends a spawner's connection to
 * the process it spawned, see `Connection` in src/lib.rs).
 *
 * Rank 1 of 2 spawns one process over MPI_COMM_SELF; the two merge their intercommunicator,
 * allocate a window over the result and hold it in a lock_all epoch, rank 1 puts and gets.
 * At exit: unlock_all and free the window, barrier on the merged communicator, then by MODE
 *   0  nothing more (what the transport did: hangs now and then, see below)
 *   1  MPI_Comm_free(merged), MPI_Comm_disconnect(inter), on both sides (what it does now)
 *   2  MPI_Comm_disconnect(inter) on both sides, merged left alive
 *   3  as 1 in the spawned process only (its disconnect fails, MPI_ERR_COMM, and the job
 *      hangs: disconnect is collective)
 *   4  MPI_Comm_disconnect(merged), then (inter), on both sides (hangs)
 * then a barrier on MPI_COMM_WORLD and MPI_Finalize. SIGPIPE is ignored, as Rust programs do.
 * Modes 2, 3 and 4 were tried 3 times each with this file and 4 with a first draft: 2 always
 * finished, 3 and 4 never did.
 *
 *   mpicc -o spawn_exit spawn_exit.c
 *   for i in $(seq 40); do MODE=0 timeout 15 mpirun --oversubscribe --bind-to none \
 *     [--allow-run-as-root] -x MODE -n 2 ./spawn_exit >/dev/null 2>&1 || echo hung; done
 *
 * Measured (2 cores, two `yes >/dev/null` running, runs of modes 0 and 1 interleaved): mode 0
 * hung in 6 of 40 runs, each time after rank 1 printed "mca_btl_tcp_frag_send: writev failed:
 * Broken pipe" and then spun in MPI_Finalize (opal_finalize, libevent's evmap_delete_all_),
 * the spawned process already gone (a SIGTERM to mpirun ended the job); mode 1 finished 40 of 40.
 * With SIGPIPE not ignored, mode 0's rank 1 dies of SIGPIPE instead, as often. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int mode = getenv("MODE") ? atoi(getenv("MODE")) : 1;
    MPI_Comm parent, inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Win win = MPI_WIN_NULL, world_win;
    char *base;
    int x = 0;
    /* A window over the job's own ranks, kept to MPI_Finalize as the transport keeps its. */
    MPI_Win_allocate(4096, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &world_win);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, world_win);
    if (parent == MPI_COMM_NULL) {
        if (rank == 1) {
            MPI_Info info;
            char host[256];
            char *args[] = {"--child", NULL};
            gethostname(host, sizeof host);
            MPI_Info_create(&info);
            MPI_Info_set(info, "host", host);
            MPI_Comm_spawn(argv[0], args, 1, info, 0, MPI_COMM_SELF, &inter, MPI_ERRCODES_IGNORE);
            MPI_Info_free(&info);
            MPI_Send(&x, 1, MPI_INT, 0, 0, inter);
            MPI_Intercomm_merge(inter, 0, &merged);
            MPI_Win_allocate(8, 1, MPI_INFO_NULL, merged, &base, &win);
            MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
            long v = 42, w = 0;
            for (int i = 0; i < 4; i++) {
                MPI_Put(&v, 8, MPI_BYTE, 1, 64, 8, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            MPI_Get(&w, 8, MPI_BYTE, 1, 64, 8, MPI_BYTE, win);
            MPI_Win_flush(1, win);
            if (w != 42)
                fprintf(stderr, "rank 1 read %ld\n", w);
            MPI_Recv(&x, 1, MPI_INT, 1, 1, merged, MPI_STATUS_IGNORE);
        }
    } else {
        inter = parent;
        MPI_Recv(&x, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
        MPI_Intercomm_merge(inter, 1, &merged);
        MPI_Win_allocate(4096, 1, MPI_INFO_NULL, merged, &base, &win);
        MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
        MPI_Send(&x, 1, MPI_INT, 0, 1, merged);
    }
    if (inter != MPI_COMM_NULL) {
        int spawned = parent != MPI_COMM_NULL;
        MPI_Win_unlock_all(win);
        MPI_Win_free(&win);
        MPI_Barrier(merged);
        if (mode == 1 || (mode == 3 && spawned)) {
            MPI_Comm_free(&merged);
            MPI_Comm_disconnect(&inter);
        } else if (mode == 2) {
            MPI_Comm_disconnect(&inter);
        } else if (mode == 4) {
            MPI_Comm_disconnect(&merged);
            MPI_Comm_disconnect(&inter);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    printf("%s %d finalized\n", parent == MPI_COMM_NULL ? "rank" : "spawned", rank);
    return 0;
}
