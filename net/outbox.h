/* outbox.h — a worker's reports to the coordinator that matter after a
 * restart (epoch lines, metrics, checkpoints), kept until the coordinator
 * acknowledges them.
 *
 * Each report is tagged with the step it belongs to. The coordinator
 * acknowledges a step once it has read a heartbeat sent after that step's
 * reports (one connection keeps order), so an acknowledged report is
 * dropped; the others are sent when the socket takes them (a coordinator
 * that is gone or paused takes nothing) and sent again to a coordinator
 * that re-adopts this worker, which says which step its files hold. */
#ifndef RT_OUTBOX_H
#define RT_OUTBOX_H

#include <stdbool.h>
#include <zmq.h>

typedef struct rt_outbox rt_outbox;

rt_outbox *rt_outbox_new(void);
void rt_outbox_destroy(rt_outbox **ob);
/* Take the n parts of one message (moved: the caller's are reset), tagged
 * with its step; RT_ERR_NOMEM when it cannot be kept. */
int rt_outbox_add(rt_outbox *ob, long tag, zmq_msg_t *parts, int n);
/* Send, in order and without waiting, what has not left; stops at the
 * first the socket does not take. */
void rt_outbox_flush(rt_outbox *ob, void *sock);
/* The coordinator read everything up to step `acked`. */
void rt_outbox_ack(rt_outbox *ob, long acked);
/* A coordinator that re-adopts this worker holds the reports up to step
 * `have`: the later ones go again. */
void rt_outbox_resend_after(rt_outbox *ob, long have);
/* Reports kept (sent or not) and not yet acknowledged. */
int rt_outbox_count(const rt_outbox *ob);

#endif
