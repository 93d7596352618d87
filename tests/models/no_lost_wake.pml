/* Model 1: no lost wake (seed RFC 018 loom model 1).
 *
 * producer { publish item; FENCE; load idle mask; if set: CAS bit clear,
 *            unpark }  ||  consumer { loop: pop item, else fetch_or(bit);
 *            re-check; park }
 *
 * Memory model: the producer's item store goes through an x86-TSO store
 * buffer that drains at an arbitrary moment (process `drain`); the fence
 * drains it. The consumer's fetch_or is a locked RMW (a full barrier on
 * x86), so its side needs no extra fence in the model. With -DBROKEN the
 * producer omits the fence: its mask load can run ahead of its buffered
 * store, both sides miss each other, and the consumer parks forever. */

#include "parker.pml"

bit item = 0;          /* the queue, in memory */
bit buf_valid = 0;     /* producer store buffer: one pending store of item=1 */
bit idle = 0;          /* consumer's idle bit */
byte pst = EMPTY;      /* consumer's parker */
bit consumed = 0;

inline drain_buffer() {
    atomic { if :: buf_valid -> item = 1; buf_valid = 0 :: else -> skip fi }
}

active proctype producer() {
    buf_valid = 1;                /* store item = 1 (buffered) */
#ifndef BROKEN
    drain_buffer();               /* seq_cst fence */
#endif
    if                            /* wake_one_if_idle: one relaxed load */
    :: idle == 1 ->
        drain_buffer();           /* the CAS is a locked RMW: drains too */
        if
        :: atomic { idle == 1 -> idle = 0 }; parker_unpark(pst)
        :: atomic { idle == 0 -> skip }
        fi
    :: else -> skip
    fi
}

active proctype drain() {
end: drain_buffer()
}

active proctype consumer() {
    do
    :: atomic { item == 1 -> item = 0; consumed = 1 }; break
    :: atomic { item == 0 -> idle = 1 };   /* fetch_or(bit) */
       if
       :: item == 1 -> idle = 0         /* re-check found work */
       :: else -> parker_park(pst); idle = 0
       fi
    od;
    assert(consumed == 1)
}
