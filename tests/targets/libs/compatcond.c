/*
 * A library bound to glibc's condition variables of before 2.3.2
 * (pthread_cond_wait@GLIBC_2.2.5 and pthread_cond_timedwait@GLIBC_2.2.5):
 * the old ABI, whose condition is 8 bytes (a pointer glibc fills on first
 * use). cprof-agent must leave these slots alone (lib/agent/got.c); the
 * current functions would take the 8 bytes for a 48-byte condition.
 * test-agent dlopens it and waits through it while block events are hooked.
 */
#include <time.h>

int old_cond_timedwait(void *cond, void *mutex, const struct timespec *abstime);
__asm__(".symver old_cond_timedwait, pthread_cond_timedwait@GLIBC_2.2.5");
int old_cond_wait(void *cond, void *mutex);
__asm__(".symver old_cond_wait, pthread_cond_wait@GLIBC_2.2.5");

int compat_cond_timedwait(void *cond, void *mutex, const struct timespec *abstime)
{
	return old_cond_timedwait(cond, mutex, abstime);
}

/* Never called (it would wait for a signal nobody sends): it binds the slot. */
int compat_cond_wait(void *cond, void *mutex)
{
	return old_cond_wait(cond, mutex);
}
