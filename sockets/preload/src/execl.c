/* The variadic exec family (execl, execlp, execle), which stable Rust cannot define: each
 * gathers its arguments into an array and calls the array form. Those calls resolve to the
 * library's own execv, execvp and execve (first in the search order under LD_PRELOAD), so a
 * new image started this way is interposed and adopts the VMMC connections it inherits, as
 * with the array forms. As POSIX says, the list ends with a null pointer, and execle's
 * environment follows that null. The library exports only its Rust symbols, so `execl` and
 * the others are Rust trampolines (src/variadic.rs) that jump here with the caller's
 * registers and stack untouched. */
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

/* The number of arguments from `arg` up to the terminating null pointer (0 when `arg` is
 * that null). */
static size_t count_args(const char *arg, va_list *ap) {
    size_t n = 0;
    for (const char *a = arg; a != NULL; a = va_arg(*ap, const char *))
        n++;
    return n;
}

/* Fills argv[0..n] from `arg` and the next n - 1 arguments of `ap`, and argv[n] with null;
 * afterwards `ap` is just past the terminating null. */
static void fill_args(const char **argv, size_t n, const char *arg, va_list *ap) {
    if (n > 0) {
        argv[0] = arg;
        for (size_t i = 1; i < n; i++)
            argv[i] = va_arg(*ap, const char *);
        (void)va_arg(*ap, const char *); /* the terminating null */
    }
    argv[n] = NULL;
}

#define GATHER(arg, argv)                                                                    \
    va_list ap;                                                                              \
    va_start(ap, arg);                                                                       \
    size_t n = count_args(arg, &ap);                                                          \
    va_end(ap);                                                                              \
    const char *argv[n + 1];                                                                 \
    va_start(ap, arg);                                                                       \
    fill_args(argv, n, arg, &ap)

int vmmc_execl(const char *path, const char *arg, ...) {
    GATHER(arg, argv);
    va_end(ap);
    return execv(path, (char *const *)argv);
}

int vmmc_execlp(const char *file, const char *arg, ...) {
    GATHER(arg, argv);
    va_end(ap);
    return execvp(file, (char *const *)argv);
}

int vmmc_execle(const char *path, const char *arg, ...) {
    GATHER(arg, argv);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, (char *const *)argv, envp);
}
