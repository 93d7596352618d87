/* Model 5: the IO backstop hand-off (framework/src/io_driver.hpp).
 *
 * Schedulers poll epoll themselves while awake; the epoll thread E blocks in
 * epoll_wait only while every scheduler is parked, and otherwise rests on a
 * futex (sequence word). The last scheduler to park must hand the polling
 * duty back: its re-check (after its idle bit is published) bumps the
 * sequence word and wakes E when E rests. Property: an IO event that arrives
 * while everyone sleeps is always delivered (no invalid end state with the
 * scheduler parked and the event pending). The real futex wait has a 10 ms
 * timeout; the model gives it none, so correctness never rests on it.
 * With -DBROKEN the parking scheduler skips the hand-off and spin finds the
 * interleaving where E rests forever and the event is never delivered. */

#include "parker.pml"

bit idle = 0;      /* the (single) scheduler's idle bit */
bit resting = 0;   /* E rests on the futex */
byte seq = 0;      /* the futex sequence word */
bit event = 0;     /* a readiness event in the kernel */
bit work = 0;      /* an actor made runnable by E */
bit handled = 0;
byte pst = EMPTY;  /* the scheduler's parker */

active proctype io_source() {
    event = 1      /* an event arrives at any moment */
}

active proctype scheduler() {
    do
    :: handled == 1 -> break
    :: atomic { event == 1 -> event = 0; handled = 1 }   /* its own epoll poll */
    :: atomic { work == 1 -> work = 0; handled = 1 }     /* an actor from E */
    :: else ->
        idle = 1;
        /* the park re-check: scheduler_idle() then the work sources */
#ifndef BROKEN
        if
        :: resting == 1 -> seq++
        :: else -> skip
        fi;
#endif
        if
        :: work == 1 || handled == 1 -> idle = 0
        :: else -> parker_park(pst); idle = 0
        fi
    od
}

active proctype epoll_thread() {
    byte s0;
    do
    :: handled == 1 -> break
    :: idle == 1 ->
        /* everyone parked: block in epoll_wait */
end_wait:
        atomic { event == 1 -> event = 0 };
        work = 1;
        parker_unpark(pst)
    :: idle == 0 ->
        s0 = seq;
        resting = 1;
        if
        :: idle == 0 ->
end_rest:   seq != s0      /* futex wait */
        :: else -> skip
        fi;
        resting = 0;
        /* one non-blocking harvest */
        if
        :: atomic { event == 1 -> event = 0 }; work = 1; parker_unpark(pst)
        :: else -> skip
        fi
    od
}
