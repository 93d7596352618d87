/* Model 4: termination (seed RFC 018 loom model 4).
 *
 * When the verdict flips to done, the scheduler that saw it runs wake_all;
 * no consumer may park forever past done (the re-check plus wake_all's
 * permits close every interleaving). With -DBROKEN the wake_all is omitted:
 * a consumer that parked before done was published sleeps forever. */

#include "parker.pml"

bit done = 0;
bit idle[2];
byte pst[2];

proctype consumer(byte id) {
    do
    :: done == 1 -> break
    :: else ->
        idle[id] = 1;
        if
        :: done == 1 -> idle[id] = 0
        :: else -> parker_park(pst[id]); idle[id] = 0
        fi
    od
}

init {
    pst[0] = EMPTY; pst[1] = EMPTY;
    run consumer(0); run consumer(1);
    done = 1;
#ifndef BROKEN
    atomic { idle[0] = 0; idle[1] = 0 };    /* wake_all */
    parker_unpark(pst[0]);
    parker_unpark(pst[1])
#endif
}
