/* Shared pieces of the RFC 018 park/wake models: a futex parker with permit
 * semantics (framework/src/coordinator.cpp, class parker). Deadlines are not
 * modelled: a park that nobody wakes blocks forever, and spin reports that
 * as an invalid end state, which is exactly a lost wake. */

#define EMPTY    0
#define PARKED   1
#define NOTIFIED 2

/* park(): consume a pending permit, or block until one is delivered. */
inline parker_park(st) {
    if
    :: atomic { st == NOTIFIED -> st = EMPTY }
    :: atomic { st == EMPTY -> st = PARKED };
       atomic { st == NOTIFIED -> st = EMPTY }
    fi
}

/* unpark(): exchange to NOTIFIED (the futex wake is the guard above). */
inline parker_unpark(st) {
    st = NOTIFIED
}
