/*
 * lib/session/keep.c, the protocol of heap --keep's background session, on
 * real sockets without an agent: a server thread serves this process's
 * name, clients ask. Replies carry what the render callback made, errors
 * come back as text, a client that says nothing does not hold the loop,
 * "stop" ends it, and a name is bound once.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session/keep.h"

static struct target self;
static pthread_t server;
static atomic_bool cancel, served;
static bool joined;
static atomic_int renders;

/* "INDEX DEBUG" as the body; "big" a 1 MiB body; "fail" an error. */
static int render(void *ctx, const char *index, int debug, char **ret, size_t *ret_len)
{
	(void)ctx;
	atomic_fetch_add(&renders, 1);
	if (!strcmp(index, "fail"))
		return -ENOMEM;
	if (!strcmp(index, "big")) {
		*ret_len = 1u << 20;
		*ret = malloc(*ret_len);
		cr_assert_not_null(*ret);
		for (size_t i = 0; i < *ret_len; i++)
			(*ret)[i] = (char)('a' + i % 26);
		return 0;
	}
	return asprintf(ret, "%s %d", index, debug) < 0 ? -ENOMEM
						       : (*ret_len = strlen(*ret), 0);
}

static bool cancelled(void *arg)
{
	return atomic_load((atomic_bool *)arg);
}

static void *serve(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	keep_serve(lfd, NULL, &self, render, NULL, &(struct cancel){ cancelled, &cancel });
	atomic_store(&served, true);
	return NULL;
}

static void start(void)
{
	int lfd;

	cr_assert_eq(target_open(&self, getpid()), 0);
	lfd = keep_bind(&self);
	cr_assert_geq(lfd, 0, "keep_bind: %s", strerror(-lfd));
	cr_assert_eq(keep_listen(lfd), 0);
	cr_assert_eq(pthread_create(&server, NULL, serve, (void *)(intptr_t)lfd), 0);
}

static void finish(void)
{
	atomic_store(&cancel, true);
	if (!joined)
		pthread_join(server, NULL);
}

/* One request on a fresh connection: keep_request()'s result. */
static int ask(const char *request, char **ret, size_t *ret_len)
{
	int fd = keep_connect(&self), r;

	cr_assert_geq(fd, 0, "keep_connect: %s", strerror(-fd));
	r = keep_request(fd, request, ret, ret_len);
	close(fd);
	return r;
}

TestSuite(keep_protocol, .init = start, .fini = finish, .timeout = 60);

Test(keep_protocol, a_profile_request_gets_what_was_rendered)
{
	char *body;
	size_t len;

	cr_assert_eq(ask("profile inuse_space 1\n", &body, &len), 0);
	cr_expect_str_eq(body, "inuse_space 1");
	cr_expect_eq(len, strlen("inuse_space 1"));
	free(body);
	cr_assert_eq(ask("profile big 0\n", &body, &len), 0);
	cr_assert_eq(len, 1u << 20);
	for (size_t i = 0; i < len; i++)
		if (body[i] != (char)('a' + i % 26))
			cr_assert_fail("byte %zu of the body differs", i);
	free(body);
}

Test(keep_protocol, errors_come_back_as_text)
{
	char *body;
	size_t len;

	cr_assert_eq(ask("profile fail 0\n", &body, &len), -EPROTO);
	cr_expect(body && strstr(body, strerror(ENOMEM)), "%s", body ? body : "(none)");
	free(body);
	cr_assert_eq(ask("hello\n", &body, &len), -EPROTO);
	cr_expect(body && strstr(body, "bad request"), "%s", body ? body : "(none)");
	free(body);
}

Test(keep_protocol, a_silent_client_does_not_hold_the_loop)
{
	int silent = keep_connect(&self);
	char *body;
	size_t len;

	cr_assert_geq(silent, 0);
	/* Served once the silent one's time for a request is out. */
	cr_assert_eq(ask("profile alloc_space 2\n", &body, &len), 0);
	cr_expect_str_eq(body, "alloc_space 2");
	free(body);
	close(silent);
}

Test(keep_protocol, stop_ends_the_session)
{
	char *body = NULL;
	size_t len;

	cr_assert_eq(ask("stop\n", &body, &len), 0);
	cr_expect_null(body, "a body after stop");
	pthread_join(server, NULL);
	joined = true;
	cr_expect(atomic_load(&served));
	cr_expect_eq(atomic_load(&renders), 0);
	/* The name is free again: nobody answers, a next session may bind it. */
	cr_expect_eq(keep_connect(&self), -ENOENT);
}

Test(keep_protocol, a_name_is_bound_once)
{
	int fd = keep_bind(&self);
	char label[128];

	cr_expect_eq(fd, -EADDRINUSE, "a second bind of the name: %d", fd);
	if (fd >= 0)
		close(fd);
	keep_socket_label(&self, label, sizeof(label));
	cr_expect(!strncmp(label, "@cprof-heap/", 12), "%s", label);
}
