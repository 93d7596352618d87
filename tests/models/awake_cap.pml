/* Model 6: the awake cap (coordinator.hpp "Awake cap", core_share.hpp).
 *
 * Two schedulers, a producer (the epoll thread or a timer: work from
 * outside) and the sampler, which moves the cap at any moment. The
 * producer publishes an item, counts the awake schedulers (bits clear) and
 * wakes one only while fewer than the cap are awake. A scheduler with
 * nothing to pop publishes its idle bit, re-checks, and parks (over the cap
 * it skips the spin, which only re-polls: not modelled). Memory is
 * sequentially consistent here; the fences' part is no_lost_wake.pml.
 *
 * Claim: whatever the cap reads, as long as it is >= 1, no item is left
 * while every scheduler sleeps (checked at `timeout`, when nothing can
 * move). -DBROKEN lets the sampler set the cap to 0: the producer then
 * never wakes anyone and spin finds the stranded item. */

#include "parker.pml"

#define PRODUCE 2

byte items = 0;
byte consumed = 0;
bit idle0 = 0;
bit idle1 = 0;
byte pst0 = EMPTY;
byte pst1 = EMPTY;
byte cap = 2;

active proctype sampler() {
    byte changes = 0;
    do
    :: changes < 3 ->
        changes++;
        if
        :: cap = 1
        :: cap = 2
#ifdef BROKEN
        :: cap = 0
#endif
        fi
    :: else -> break
    od
}

active proctype producer() {
    byte i = 0;
    byte awake;
    do
    :: i < PRODUCE ->
        i++;
        items++;
        awake = (1 - idle0) + (1 - idle1);
        if
        :: awake < cap ->
            if
            :: atomic { idle1 == 1 -> idle1 = 0 }; parker_unpark(pst1)
            :: atomic { idle0 == 1 -> idle0 = 0 }; parker_unpark(pst0)
            :: atomic { idle0 == 0 && idle1 == 0 -> skip }
            fi
        :: else -> skip
        fi
    :: else -> break
    od
}

proctype scheduler(bit id) {
    do
    :: atomic { items > 0 -> items--; consumed++ }
    :: atomic { items == 0 ->
            if
            :: id == 0 -> idle0 = 1
            :: else -> idle1 = 1
            fi }
        if
        :: items > 0 ->
            if
            :: id == 0 -> idle0 = 0
            :: else -> idle1 = 0
            fi
        :: else ->
            if
            :: id == 0 ->
                if
                :: atomic { pst0 == NOTIFIED -> pst0 = EMPTY }
                :: atomic { pst0 == EMPTY -> pst0 = PARKED };
end0:              atomic { pst0 == NOTIFIED -> pst0 = EMPTY }
                fi;
                idle0 = 0
            :: else ->
                if
                :: atomic { pst1 == NOTIFIED -> pst1 = EMPTY }
                :: atomic { pst1 == EMPTY -> pst1 = PARKED };
end1:              atomic { pst1 == NOTIFIED -> pst1 = EMPTY }
                fi;
                idle1 = 0
            fi
        fi
    od
}

init {
    run scheduler(0);
    run scheduler(1)
}

active proctype check() {
end: timeout -> assert(consumed == PRODUCE)
}
