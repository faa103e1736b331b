/*
 * The kernel's own cost of the ways to measure a mounted volume, per volume, without headroom's
 * code around it: CPU time (getrusage, user + system) of N mounts x ITERATIONS calls.
 * BENCHMARKS.md, "Re-measuring a known volume", quotes it.
 *
 *   gcc -O2 -o /tmp/statfs-floor scripts/statfs-floor.c
 *   R=$(mktemp -d); for i in $(seq 0 499); do
 *     d=$R/pods/pod-$i/volumes/kubernetes.io~csi/pv-$i/mount; mkdir -p $d
 *     mount -t tmpfs -o size=1m tmpfs $d; done
 *   /tmp/statfs-floor $R 500 200
 *   for i in $(seq 0 499); do umount $R/pods/pod-$i/volumes/kubernetes.io~csi/pv-$i/mount; done
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x4000U
#endif

static double cpu(void) {
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: %s ROOT N ITERATIONS\n", argv[0]);
		return 2;
	}
	const char *root = argv[1];
	int n = atoi(argv[2]), it = atoi(argv[3]);
	if (n < 1 || n > 500 || it < 1)
		return 2;
	static char rel[500][256], abs_[500][512];
	for (int i = 0; i < n; i++) {
		snprintf(rel[i], sizeof rel[i], "pods/pod-%d/volumes/kubernetes.io~csi/pv-%d/mount", i, i);
		snprintf(abs_[i], sizeof abs_[i], "%.250s/%.250s", root, rel[i]);
	}
	int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	struct statfs sf;
	struct statx sx;
	double t;
#define BENCH(name, body)                                                                      \
	t = cpu();                                                                             \
	for (int k = 0; k < it; k++)                                                           \
		for (int i = 0; i < n; i++) {                                                  \
			body;                                                                  \
		}                                                                              \
	printf("| %s | %.2f |\n", name, (cpu() - t) * 1e6 / (n * (double)it));
	printf("| calls per volume | CPU per volume (µs) |\n|---|---:|\n");
	BENCH("before: `openat2` beneath the root + `fstatfs` + `close`", {
		int fd = syscall(SYS_openat2, rfd, rel[i], &how, sizeof how);
		if (fd < 0) { perror(rel[i]); return 1; }
		fstatfs(fd, &sf);
		close(fd);
	});
	BENCH("now: `open` of the path + `statx` (mount id) + `fstatfs` + `close`", {
		int fd = open(abs_[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) { perror(abs_[i]); return 1; }
		statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID | STATX_MNT_ID_UNIQUE | STATX_INO, &sx);
		fstatfs(fd, &sf);
		close(fd);
	});
	BENCH("`statfs` of the path alone (no identity: not safe)", statfs(abs_[i], &sf));
	static int pfd[500];
	for (int i = 0; i < n; i++) {
		char p[256];
		snprintf(p, sizeof p, "pods/pod-%d/volumes/kubernetes.io~csi/pv-%d", i, i);
		pfd[i] = openat(rfd, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (pfd[i] < 0) { perror(p); return 1; }
	}
	BENCH("`openat` of the path below the root descriptor + `statx` + `fstatfs` + `close`", {
		int fd = openat(rfd, rel[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) { perror(rel[i]); return 1; }
		statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID | STATX_MNT_ID_UNIQUE | STATX_INO, &sx);
		fstatfs(fd, &sf);
		close(fd);
	});
	BENCH("`openat` of `mount` in the kept directory + `statx` + `fstatfs` + `close`", {
		int fd = openat(pfd[i], "mount", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) { perror("mount"); return 1; }
		statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID | STATX_MNT_ID_UNIQUE | STATX_INO, &sx);
		fstatfs(fd, &sf);
		close(fd);
	});
	BENCH("`statx` of `mount` in the kept directory alone (the identity, no numbers)",
	      statx(pfd[i], "mount", AT_SYMLINK_NOFOLLOW, STATX_MNT_ID | STATX_MNT_ID_UNIQUE | STATX_INO, &sx));
	BENCH("`getppid` (a system call's entry and exit)", getppid());
	return 0;
}
