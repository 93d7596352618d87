/* Model 3: timekeeper handoff (seed RFC 018 loom model 3).
 *
 * The timekeeper peeks the heap minimum and arms it under the timers lock,
 * then parks toward it. An inserter publishes an EARLIER deadline under the
 * same lock and runs the insert check (earlier than armed => unpark the
 * holder). The earlier deadline must always be honoured: either the
 * timekeeper armed it directly, or it is woken to re-peek. Parking toward
 * the stale later deadline is modelled as blocking forever (no time).
 * With -DBROKEN the insert check is skipped and spin finds that interleaving. */

#include "parker.pml"

#define FAR  2
#define NEAR 1
#define NONE 255
#define NO_HOLDER 255

bit lock = 0;
byte heap_min = FAR;
byte tk_holder = NO_HOLDER;
byte tk_armed = NONE;
byte pst = EMPTY;
byte armed_value = NONE;

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }

active proctype timekeeper() {
    acquire();
    armed_value = heap_min;                 /* peek */
    tk_holder = 0; tk_armed = armed_value;  /* try_arm_timer */
    release();
    if
    :: armed_value == FAR -> parker_park(pst)   /* must be woken */
    :: else -> skip
    fi;
    tk_armed = NONE; tk_holder = NO_HOLDER;     /* disarm */
    acquire();
    assert(heap_min == NEAR);                   /* re-peek sees the insert */
    release()
}

active proctype inserter() {
    acquire();
    heap_min = NEAR;
#ifndef BROKEN
    if                                         /* timer_inserted */
    :: NEAR < tk_armed && tk_holder != NO_HOLDER -> parker_unpark(pst)
    :: else -> skip
    fi;
#endif
    release()
}
