/* Model 2: chain propagation (seed RFC 018 loom model 2).
 *
 * Two items, two parked consumers, ONE producer wake. Each consumer that pops
 * an item then waits for the other item to be taken too (the two popped
 * actors rendezvous), so progress needs both consumers running at once: the
 * chain rule (a consumer that pops while more work is queued wakes one idle
 * sibling) must propagate the single wake. With -DBROKEN the chain rule is
 * omitted and the run can deadlock. */

#include "parker.pml"

byte items = 0;
byte taken = 0;
bit idle[2];
byte pst[2];

inline wake_one_if_idle() {
    if
    :: atomic { idle[1] == 1 -> idle[1] = 0 }; parker_unpark(pst[1])
    :: atomic { idle[1] == 0 && idle[0] == 1 -> idle[0] = 0 }; parker_unpark(pst[0])
    :: atomic { idle[0] == 0 && idle[1] == 0 -> skip }
    fi
}

proctype consumer(byte id) {
    do
    :: atomic { items > 0 -> items--; taken++ };
#ifndef BROKEN
       if :: items > 0 -> wake_one_if_idle() :: else -> skip fi;   /* chain rule */
#endif
       taken == 2;          /* rendezvous with the other popped actor */
       break
    :: atomic { items == 0 && taken < 2 -> idle[id] = 1 };
       if
       :: items > 0 || taken == 2 -> idle[id] = 0
       :: else -> parker_park(pst[id]); idle[id] = 0
       fi
    :: atomic { taken == 2 && items == 0 -> skip }; break
    od
}

init {
    pst[0] = EMPTY; pst[1] = EMPTY;
    run consumer(0); run consumer(1);
    /* wait until both are parked or committed to park, then publish */
    (idle[0] == 1 && idle[1] == 1);
    items = 2;
    wake_one_if_idle()
}
