/*
 * lockbench SECONDS REPORT
 *
 * The uncontended lock of scripts/bench-locks: one thread locks and unlocks
 * a pthread mutex as fast as it can (nobody else ever takes it). On SIGUSR2
 * it writes the pairs done so far and the CPU time the whole process has
 * used ("ops N\ncpu_ns T\n", as allocbench) to REPORT (beside, then
 * renamed). Prints "ready"; exits after SECONDS.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_ulong ops;
static volatile sig_atomic_t report_now;
static time_t end;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long guarded;

static void *worker(void *arg)
{
	(void)arg;
	while (time(NULL) < end) {
		for (int i = 0; i < 65536; i++) {
			pthread_mutex_lock(&m);
			guarded++;
			pthread_mutex_unlock(&m);
		}
		atomic_fetch_add(&ops, 65536);
	}
	return NULL;
}

static void on_usr2(int sig)
{
	(void)sig;
	report_now = 1;
}

int main(int argc, char **argv)
{
	pthread_t th;

	if (argc < 3) {
		fprintf(stderr, "usage: lockbench SECONDS REPORT\n");
		return 2;
	}
	alarm((unsigned)atoi(argv[1]) + 10);
	end = time(NULL) + atoi(argv[1]);
	signal(SIGUSR2, on_usr2);
	pthread_create(&th, NULL, worker, NULL);
	printf("ready\n");
	fflush(stdout);
	while (time(NULL) < end) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		if (report_now) {
			char tmp[4200];
			FILE *f;

			report_now = 0;
			snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
			f = fopen(tmp, "w");
			if (f) {
				struct timespec cpu;

				clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
				fprintf(f, "ops %lu\ncpu_ns %lld\n", atomic_load(&ops),
					(long long)cpu.tv_sec * 1000000000LL + cpu.tv_nsec);
				fclose(f);
				rename(tmp, argv[2]);
			}
		}
	}
	pthread_join(th, NULL);
	return 0;
}
