// clockshim: an LD_PRELOAD library that moves a process's wall clock.
//
// It wraps clock_gettime (for CLOCK_REALTIME and CLOCK_REALTIME_COARSE
// only), gettimeofday and time, adding an offset in milliseconds read from
// the file named by $CLOCKSHIM_FILE (a decimal, possibly negative; a
// missing or unreadable file keeps the last offset, initially 0). The
// file is read again at most once a millisecond, so writing it steps the
// clock within a millisecond, as `date -s` or an NTP step would.
// CLOCK_MONOTONIC and the other clocks are left alone, as a real step
// leaves them.
//
// The hazard tests (internal/hazards, TestHazardServerClockJump) compile
// it with gcc into a temporary directory at test time:
//
//	gcc -shared -fPIC -O2 -o clockshim.so clockshim.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_gettimeofday)(struct timeval *, void *);
static char offset_file[4096]; // a copy: Redis overwrites the environment
                               // with its process title after start
static volatile int64_t offset_ns;    // the offset in force
static volatile int64_t last_read_ns; // CLOCK_MONOTONIC of the last read

static void init(void) {
	real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
	real_gettimeofday = dlsym(RTLD_NEXT, "gettimeofday");
	const char *f = getenv("CLOCKSHIM_FILE");
	if (f && !offset_file[0] && strlen(f) < sizeof offset_file) {
		strcpy(offset_file, f);
	}
}

__attribute__((constructor)) static void clockshim_init(void) { init(); }

// offset returns the offset in nanoseconds, reading the file when the
// last read is a millisecond old.
static int64_t offset(void) {
	if (!real_clock_gettime) {
		init();
	}
	if (!offset_file[0]) {
		return 0;
	}
	struct timespec m;
	if (real_clock_gettime(CLOCK_MONOTONIC, &m) != 0) {
		return offset_ns;
	}
	int64_t now = (int64_t)m.tv_sec * 1000000000 + m.tv_nsec;
	if (last_read_ns != 0 && now - last_read_ns < 1000000) {
		return offset_ns;
	}
	last_read_ns = now;
	int fd = open(offset_file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return offset_ns;
	}
	char buf[32];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n > 0) {
		buf[n] = 0;
		char *end;
		long long ms = strtoll(buf, &end, 10);
		if (end != buf) {
			offset_ns = (int64_t)ms * 1000000;
		}
	}
	return offset_ns;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	if (!real_clock_gettime) {
		init();
	}
	int r = real_clock_gettime(id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset();
		ts->tv_sec = ns / 1000000000;
		ts->tv_nsec = ns % 1000000000;
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	if (!real_gettimeofday) {
		init();
	}
	int r = real_gettimeofday(tv, tz);
	if (r == 0) {
		int64_t us = (int64_t)tv->tv_sec * 1000000 + tv->tv_usec + offset() / 1000;
		tv->tv_sec = us / 1000000;
		tv->tv_usec = us % 1000000;
	}
	return r;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) {
		*t = ts.tv_sec;
	}
	return ts.tv_sec;
}
