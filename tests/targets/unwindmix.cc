/*
 * unwindmix [SECONDS]: threads stopped in the places an unwinder finds
 * hardest, for the libunwind-ptrace oracle (tests/integration/test-oracle.c):
 *
 *   "nested"    nanosleep under three noinline C++ frames
 *   "cond"      pthread_cond_wait
 *   "handler"   asleep inside a signal handler (a signal frame below it)
 *   "unwinding" asleep in a destructor that an exception in flight runs
 *               (libgcc's unwinder and the personality routine below it)
 *   "vdso"      calling clock_gettime() in a loop (the vDSO's code)
 *   main        sleep()
 *
 * Prints "ready" once every thread is in place; exits after SECONDS
 * (default 30, at most 120).
 */
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <pthread.h>
#include <signal.h>
#include <stdexcept>
#include <unistd.h>

static std::atomic<int> in_place{ 0 };
static std::atomic<bool> done{ false };
/* The handler thread has its name: a signal before would sleep in the
 * handler on top of a thread that never names itself. */
static std::atomic<bool> handler_named{ false };

static void nap()
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	nanosleep(&ts, nullptr);
}

static void nap_until_done()
{
	while (!done.load())
		nap();
}

namespace deep {
__attribute__((noinline)) void leaf(int depth)
{
	if (depth == 0)
		in_place++;
	nap_until_done();
	asm volatile("");
}
__attribute__((noinline)) void middle(int d) { leaf(d); asm volatile(""); }
__attribute__((noinline)) void top(int d) { middle(d); asm volatile(""); }
} // namespace deep

static void *nested(void *)
{
	pthread_setname_np(pthread_self(), "nested");
	deep::top(0);
	return nullptr;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

static void *cond_wait(void *)
{
	pthread_setname_np(pthread_self(), "cond");
	pthread_mutex_lock(&lock);
	in_place++;
	while (!done.load())
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	return nullptr;
}

static void on_usr1(int)
{
	in_place++;
	nap_until_done();
}

static __attribute__((noinline)) void interrupted()
{
	/* Spins until the handler runs on top of this frame, then never
	 * returns to it before the end. */
	while (!done.load())
		asm volatile("pause");
}

static void *handler(void *)
{
	pthread_setname_np(pthread_self(), "handler");
	handler_named = true;
	interrupted();
	return nullptr;
}

struct guard {
	__attribute__((noinline)) ~guard()
	{
		in_place++;
		nap_until_done();
	}
};

static __attribute__((noinline)) void throws()
{
	guard g;

	throw std::runtime_error("unwinding");
}

static void *unwinding(void *)
{
	pthread_setname_np(pthread_self(), "unwinding");
	try {
		throws();
	} catch (const std::exception &) {
	}
	return nullptr;
}

static void *vdso(void *)
{
	struct timespec ts;

	pthread_setname_np(pthread_self(), "vdso");
	in_place++;
	while (!done.load())
		clock_gettime(CLOCK_MONOTONIC, &ts);
	return nullptr;
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 30;
	void *(*const fns[])(void *) = { nested, cond_wait, handler, unwinding, vdso };
	pthread_t th[5];
	struct sigaction sa = {};

	if (seconds <= 0 || seconds > 120)
		seconds = 30;
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, nullptr);
	for (int i = 0; i < 5; i++)
		pthread_create(&th[i], nullptr, fns[i], nullptr);
	while (!handler_named.load())
		usleep(1000);
	usleep(50 * 1000);
	pthread_kill(th[2], SIGUSR1);
	while (in_place.load() < 5)
		usleep(1000);
	usleep(50 * 1000); /* each is asleep in its call now */
	std::printf("ready\n");
	std::fflush(stdout);
	sleep((unsigned)seconds);
	done = true;
	pthread_mutex_lock(&lock);
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < 5; i++)
		pthread_join(th[i], nullptr);
	return 0;
}
