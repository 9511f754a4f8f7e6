/*
 * The unit-claim, takeover and membership protocol of bagkeeper, as a
 * Promela model (issue 10). docs/architecture.md, "The model", says what it
 * covers and how to run it; model_test.go replays its random simulations on
 * the real state machine.
 *
 * One process runs every transition, each one atomic: the raft group is a
 * linearizable log, so an op the model applies is applied whole, in order,
 * and the model's apply is the state machine's logic for that op
 * (raftstore/state/apply.go). Time is abstract: a timeout ("unreachable for
 * --unit-release-after", "the lease ran out") is an event the environment
 * may fire only while what the timeout waits for holds (the holder is
 * paused or dead, nobody renews).
 *
 * Switches (spin -D...):
 *   STATEFULSET       pods keep their name and claim their ordinal unit
 *                     (default: Deployment pods, a new name each time, claim
 *                     without an ordinal within the declared scale)
 *   FAULTS=n          how many faults the environment may inject
 *   LATE_CALM         the calm comes only after every fault (for long random simulations)
 *   MUTATE_NOFENCE    a hook commit is applied without checkFence
 *   MUTATE_NOSCALE    claimUnit creates units beyond the declared scale
 *   MUTATE_RAFTLEASE  the raft leader's unit takes the lease (leadership tied
 *                     to the raft leader instead of the unit)
 *   MUTATE_NOCAS      the reaper's removal is not a compare-and-set
 *   MUTATE_JOINVOTER  admit adds a new incarnation as a voter
 *   MUTATE_NORELEASE  the leader never releases the unit of an unreachable holder
 *   CALM_ENDS         the LTL property that every calm run ends (pan -a)
 *   WITNESS_SAMEPOD   pan finds a run through a rare branch of claimUnit (model_test.go)
 *
 * Every "OP" line printed is one command applied to the state machine and
 * its result; every "ST" line the state machine's units, lease and waiting
 * claimants after it. model_test.go parses both.
 */

#ifndef NPOD
#define NPOD 3
#endif
#ifndef FAULTS
#define FAULTS 3
#endif
#ifndef SCALE
#define SCALE 2 /* --units */
#endif
#ifdef STATEFULSET
#define MAXU NPOD
#else
#define MAXU (SCALE + FAULTS) /* unit numbers a bounded run can reach */
#endif
#define MAXM (NPOD + FAULTS + 1) /* member ids (pod incarnations) a bounded run can reach */
#define MAXP (NPOD + FAULTS + 1) /* pod names */
#define TARGET 3   /* --voters */
#define NADDR 4    /* pod addresses */
#define NONE 255

#ifdef STATEFULSET
#define ORDINAL(s) s
#define ORD 1
#else
#define ORDINAL(s) NONE
#define ORD 0
#endif

/* unit states (state.UnitState); U_NONE: no such unit yet */
#define U_NONE 0
#define U_ACTIVE 1
#define U_RELEASED 2
#define U_REMOVED 3

/* command results (storepb.ErrorCode, as model_test.go maps them) */
#define R_OK 0
#define R_FENCED 1
#define R_CONFLICT 2
#define R_NOTFOUND 3
#define R_NOTLEADER 4

/* pod states */
#define DEAD 0
#define RUN 1
#define PAUSED 2

/* ---- the replicated state (raftstore/state) ---- */
byte u_st[MAXU], u_m[MAXU], u_pod[MAXU], u_ep[MAXU];
bool u_ord[MAXU];
byte u_rank[MAXU];  /* among released units, 1 = released longest ago */
byte nextu;         /* meta.nextUnit */
bool claimant[MAXM];
byte l_unit = NONE; /* the lease: unit, still running, epoch */
bool l_valid;
byte l_ep;

/* ---- the raft configuration (raftstore: admit, autopilot) ---- */
bool inconf[MAXM], voter[MAXM], caught[MAXM];
byte m_pod[MAXM], m_addr[MAXM], mslot[MAXM];
byte rl = 0; /* the raft leader (a member id), NONE while there is none */

/* ---- the pods ---- */
byte p_st[NPOD], p_m[NPOD], p_name[NPOD];
byte p_u[NPOD], p_ep[NPOD]; /* the unit and claim this pod's agent knows (Sidecar.Unit, the fence's epoch) */
bool p_hold[NPOD];          /* the agent runs the unit's hooks */
bool p_lost[NPOD];          /* unitLost: removed, or (ordinal) taken over */
bool p_bel[NPOD];           /* the agent believes its unit leads (tendLease returned true) */

/* ---- the environment ---- */
byte nm = NPOD, np = NPOD; /* next member id, next pod name */
byte faults;
bool calm;                 /* no more faults: every pod runs, discovery answers */
bool disc = true;          /* discovery answers */
bool rdec[MAXU];           /* the reaper decided to remove the unit and has not applied it yet */
bool seenok[MAXU];         /* ... and the unit stayed released since (what OnlyReleasedBefore compares) */

/* ---- ghosts for the invariants ---- */
#ifdef WITNESS_SAMEPOD
/* not a property: pan's "counterexample" is a run in which a pod's own released unit goes before
   one released longer ago, a rare branch of claimUnit that model_test.go replays */
bool witnessed;
#endif
bool calm_over;                 /* the calm ended: nothing left to do, every unit held */
byte lastep[MAXU];         /* the claim (epoch) under which the unit's last hook commit applied */
byte lastcm[MAXU];         /* and its member */

/* scratch, written before read inside one atomic step: not part of the state */
hidden byte k, j, r, same, old, live, n, m, tally, x;
hidden byte waits;

/* derived from the state after every step (after()): what the guards need */
bool todo[NPOD];  /* the pod's claimLoop has something to do */
byte nvot, nrun, nkeep; /* voters; running voters; voters that still have their disk */

#define LEADER_UP (rl != NONE && mslot[rl] != NONE && p_st[mslot[rl]] == RUN)
#define MRUN(x) (mslot[x] != NONE && p_st[mslot[x]] == RUN)
#define FAULT (!calm && faults < FAULTS)

inline dump_state() {
	printf("ST");
	for (k : 0 .. MAXU-1) {
		printf(" u%d=%d,%d,%d,%d,%d", k, u_st[k], u_m[k], u_pod[k], u_ep[k], u_ord[k])
	}
	printf(" lease=%d,%d,%d cl=", l_unit, l_valid, l_ep);
	for (k : 0 .. MAXM-1) { printf("%d", claimant[k]) }
	printf("\n")
}

/* ---- invariants, checked after every transition; then what the guards derive ---- */
inline after() {
	live = 0;
	for (k : 0 .. MAXU-1) {
		if
		:: u_st[k] == U_ACTIVE || u_st[k] == U_RELEASED -> live++
		:: else
		fi
	}
#ifndef STATEFULSET
	/* never more units than the declared scale (claimUnit) */
	assert(live <= SCALE);
#endif
	/* at most one unit believes it leads, and it holds the lease while the lease runs; only a pod
	   that runs its unit's hooks (agent.(*Agent).runUnit) asks is-leader */
	for (k : 0 .. NPOD-1) { if :: !p_hold[k] -> p_bel[k] = false :: else fi }
	for (k : 0 .. NPOD-1) {
		for (j : 0 .. NPOD-1) {
			assert(!(p_st[k] == RUN && p_st[j] == RUN && p_bel[k] && p_bel[j]) || p_u[k] == p_u[j])
		}
		assert(!(p_st[k] == RUN && p_bel[k] && l_valid) || l_unit == p_u[k])
	}
#ifdef WITNESS_SAMEPOD
	assert(!witnessed);
#endif
	nvot = 0; nrun = 0; nkeep = 0;
	for (k : 0 .. MAXM-1) {
		/* a superseded incarnation is out of the configuration once the new one is in; no two members share an address */
		for (j : k+1 .. MAXM-1) {
			assert(!(inconf[k] && inconf[j]) || (m_pod[k] != m_pod[j] && m_addr[k] != m_addr[j]))
		}
		/* a voter (one that grants votes) is caught up: a new incarnation votes only once promoted */
		assert(!(inconf[k] && voter[k]) || caught[k]);
		if
		:: inconf[k] && voter[k] ->
			nvot++;
			if :: MRUN(k) -> nrun++ :: else fi;
			if :: mslot[k] != NONE && (ORD || p_st[mslot[k]] != DEAD) -> nkeep++ :: else fi
		:: else
		fi
	}
	for (x : 0 .. NPOD-1) { claimloop(x, false) }
	k = 0 /* a d_step must not end in a loop */
}

/* ---- state.(*txn) ---- */

inline rank(x) { /* x is released now: it is the most recently released */
	tally = 0;
	for (k : 0 .. MAXU-1) { if :: k != x && u_st[k] == U_RELEASED -> tally++ :: else fi }
	u_rank[x] = tally + 1
}

inline unrank(x) { /* x is no longer released */
	for (k : 0 .. MAXU-1) { if :: u_st[k] == U_RELEASED && u_rank[k] > u_rank[x] -> u_rank[k]-- :: else fi }
	u_rank[x] = 0
}

/* state.(*txn).claimNumber */
inline claim_number(cm, cpod, cn, cord) {
	claimant[cm] = false;
	if
	:: u_st[cn] == U_ACTIVE && u_m[cn] == cm && u_pod[cn] == cpod && u_ord[cn] == cord -> skip
	:: else ->
		if
		:: u_st[cn] == U_NONE -> u_ep[cn] = 1
		:: u_st[cn] == U_ACTIVE && u_m[cn] == cm -> skip /* the same holder claiming it another way: not a new claim */
		:: else -> u_ep[cn]++
		fi;
		if :: u_st[cn] == U_RELEASED -> unrank(cn) :: else fi;
		seenok[cn] = false;
		u_st[cn] = U_ACTIVE; u_m[cn] = cm; u_pod[cn] = cpod; u_ord[cn] = cord;
		if :: cn >= nextu -> nextu = cn + 1 :: else fi
	fi
}

/* state.(*txn).claimUnit; r: the unit, or NONE and waits */
inline claim_unit(cm, cpod, cordinal) {
	r = NONE; waits = false;
	if
	:: cordinal != NONE -> claim_number(cm, cpod, cordinal, true); r = cordinal
	:: else ->
		same = NONE; old = NONE; live = 0;
		for (k : 0 .. MAXU-1) {
			if
			:: u_st[k] == U_NONE || u_st[k] == U_REMOVED || r != NONE -> skip
			:: else ->
				live++;
				if
				:: u_st[k] == U_ACTIVE && u_m[k] == cm -> r = k
				:: else ->
					if
					:: u_pod[k] == cpod ->
						if :: same == NONE || (u_st[k] == U_ACTIVE && u_st[same] != U_ACTIVE) -> same = k :: else fi
					:: else ->
						if :: u_st[k] == U_RELEASED && (old == NONE || u_rank[k] < u_rank[old]) -> old = k :: else fi
					fi
				fi
			fi
		}
#ifdef WITNESS_SAMEPOD
		if :: r == NONE && same != NONE && old != NONE -> witnessed = true :: else fi;
#endif
		if
		:: r != NONE -> claimant[cm] = false
		:: r == NONE && same != NONE -> claim_number(cm, cpod, same, false); r = same
		:: r == NONE && same == NONE && old != NONE -> claim_number(cm, cpod, old, false); r = old
#ifndef MUTATE_NOSCALE
		:: r == NONE && same == NONE && old == NONE && SCALE > 0 && live >= SCALE -> claimant[cm] = true; waits = true
#endif
		:: else ->
			assert(nextu < MAXU); /* the model's bound, not a property */
			r = nextu; claim_number(cm, cpod, r, false)
		fi
	fi
}

/* state.(*txn).releaseUnit */
inline release_unit(rn, expect) {
	if
	:: u_st[rn] == U_NONE || u_st[rn] == U_REMOVED -> r = R_NOTFOUND
	:: expect != NONE && u_m[rn] != expect -> r = R_CONFLICT
	:: u_st[rn] == U_RELEASED -> r = R_OK
	:: else -> u_st[rn] = U_RELEASED; rank(rn); r = R_OK
	fi
}

/* state.(*txn).removeUnit; mode 0: --force, 1: the reaper's compare-and-set, 2: an operator's (released only) */
inline remove_unit(rn, mode) {
	if
	:: u_st[rn] == U_NONE -> r = R_NOTFOUND
	:: u_st[rn] == U_REMOVED -> r = R_OK
#ifndef MUTATE_NOCAS
	:: mode == 1 && !(u_st[rn] == U_RELEASED && seenok[rn]) -> r = R_CONFLICT
#endif
	:: mode == 2 && u_st[rn] != U_RELEASED -> r = R_CONFLICT
	:: else ->
		/* no unit removed except by an operator, or released and unclaimed through the grace period */
		assert(mode != 1 || u_st[rn] == U_RELEASED);
		if :: u_st[rn] == U_RELEASED -> unrank(rn) :: else fi;
		u_st[rn] = U_REMOVED; seenok[rn] = false;
		if
		:: l_unit == rn ->
			l_unit = NONE; l_valid = false;
			/* is-leader answers from the member's state, which says so at once (the model takes a
			   paused member's state as caught up when it resumes: see "What it does not cover") */
			for (k : 0 .. NPOD-1) { if :: p_u[k] == rn -> p_bel[k] = false :: else fi }
		:: else
		fi;
		r = R_OK
	fi
}

#define FENCE_OK(fn, fm, fe) (fn != NONE && u_st[fn] == U_ACTIVE && u_m[fn] == fm && u_ep[fn] == fe)

/* a fenced hook commit: state.(*Machine) apply -> state.(*txn).checkFence */
inline commit(cn, cm, ce) {
#ifdef MUTATE_NOFENCE
	if :: u_st[cn] == U_ACTIVE || u_st[cn] == U_RELEASED -> r = R_OK :: else -> r = R_NOTFOUND fi;
#else
	if :: FENCE_OK(cn, cm, ce) -> r = R_OK :: else -> r = R_FENCED fi;
#endif
	if
	:: r == R_OK ->
		/* never two holders whose commits for one unit both apply: commits apply under the claims in order */
		assert(ce > lastep[cn] || (ce == lastep[cn] && cm == lastcm[cn]));
		lastep[cn] = ce; lastcm[cn] = cm
	:: else
	fi
}

/* state.(*txn).claimLease, fenced */
inline claim_lease(cn, cm, ce) {
	if
	:: !FENCE_OK(cn, cm, ce) -> r = R_FENCED
#ifdef MUTATE_RAFTLEASE
	:: l_unit != NONE && l_unit != cn && l_valid && cm != rl -> r = R_NOTLEADER
#else
	:: l_unit != NONE && l_unit != cn && l_valid -> r = R_NOTLEADER
#endif
	:: else ->
		/* leadership does not move while the leader unit's holder renews */
		assert(!(l_valid && l_unit != NONE && l_unit != cn));
		if :: l_unit != cn || !l_valid -> l_ep++ :: else fi;
		l_unit = cn; l_valid = true; r = R_OK
	fi
}

/* could member wm's claim change nothing (it waits, and waited already)? */
inline would_wait(wm, ws) {
	waits = false;
#ifndef STATEFULSET
	if
	:: claimant[wm] ->
		waits = true;
		for (k : 0 .. MAXU-1) {
			if
			:: u_st[k] == U_RELEASED || (u_st[k] == U_ACTIVE && (u_pod[k] == p_name[ws] || u_m[k] == wm)) -> waits = false
			:: else
			fi
		}
		tally = 0;
		for (k : 0 .. MAXU-1) { if :: u_st[k] == U_ACTIVE || u_st[k] == U_RELEASED -> tally++ :: else fi }
		if :: tally < SCALE -> waits = false :: else fi
	:: else
	fi
#endif
}



/* sidecar.(*Sidecar).claimLoop for pod cs: take the unit the state says it holds; see its unit removed
   or (ordinal) taken over; or claim -> sidecar.(*Sidecar).claim -> state.(*txn).claimUnit.
   doit false: only say (todo) whether there is something to do */
inline claimloop(cs, doit) {
	todo[cs] = false;
	if
	/* synced: the member knows the leader and has caught up, so it is in the configuration */
	:: p_st[cs] == RUN && LEADER_UP && !p_lost[cs] && inconf[p_m[cs]] && caught[p_m[cs]] ->
		m = p_m[cs]; n = NONE;
		for (k : 0 .. MAXU-1) { if :: u_st[k] == U_ACTIVE && u_m[k] == m -> n = k :: else fi }
		if
		:: n != NONE -> /* st.UnitHeldBy(id) */
			if
			:: p_u[cs] != n || p_ep[cs] != u_ep[n] || !p_hold[cs] ->
				todo[cs] = true;
				if :: doit -> if :: p_u[cs] != n -> p_bel[cs] = false :: else fi; p_u[cs] = n; p_ep[cs] = u_ep[n]; p_hold[cs] = true :: else fi
			:: else
			fi
		:: n == NONE && p_u[cs] != NONE && u_st[p_u[cs]] == U_REMOVED -> /* isRemoved: unitLost */
			todo[cs] = true;
			if :: doit -> p_lost[cs] = true; p_hold[cs] = false :: else fi
		:: n == NONE && ORD && p_u[cs] != NONE && u_st[p_u[cs]] == U_ACTIVE && u_m[p_u[cs]] != m -> /* takenOver */
			todo[cs] = true;
			if :: doit -> p_lost[cs] = true; p_hold[cs] = false :: else fi
		:: else ->
			would_wait(m, cs);
			if
			:: !waits ->
				todo[cs] = true;
				if
				:: doit ->
					p_hold[cs] = false;
					claim_unit(m, p_name[cs], ORDINAL(cs));
					printf("OP claim m=%d pod=%d ord=%d scale=%d res=%d wait=%d\n", m, p_name[cs], ORDINAL(cs), SCALE, r, waits);
					if :: r != NONE && p_u[cs] != r -> p_bel[cs] = false :: else fi;
					if :: r != NONE -> p_u[cs] = r; p_ep[cs] = u_ep[r]; p_hold[cs] = true :: else fi;
					dump_state()
				:: else
				fi
			:: else
			fi
		fi
	:: else
	fi
}

#define ADDRFREE(a) ((p_st[0] == DEAD || m_addr[p_m[0]] != a) && (NPOD < 2 || p_st[1] == DEAD || m_addr[p_m[1]] != a) && (NPOD < 3 || p_st[2] == DEAD || m_addr[p_m[2]] != a) && (NPOD < 4 || p_st[3] == DEAD || m_addr[p_m[3]] != a))
/* losing member x for good leaves the voters that keep their disk a majority (bagkeeper promises nothing past that) */
#define MAJORITY_KEPT(x) (!(inconf[x] && voter[x]) || nkeep - 1 >= nvot / 2 + 1)

/* a new incarnation in slot s: a member id, pod name pn, address a */
inline incarnate(s, pn, a) {
	assert(nm < MAXM); /* the model's bound */
	mslot[p_m[s]] = NONE;
	p_m[s] = nm; m_pod[nm] = pn; m_addr[nm] = a; mslot[nm] = s; nm++;
	p_name[s] = pn; p_st[s] = RUN;
	p_u[s] = NONE; p_ep[s] = 0; p_hold[s] = false; p_lost[s] = false; p_bel[s] = false
}

/* ================= a pod: its sidecar, its agent, and what happens to it ================= */
proctype pod(byte s) {
end:
	do
	/* sidecar.(*Sidecar).claimLoop -> claim -> state.(*txn).claimUnit */
	:: d_step { todo[s] -> claimloop(s, true); after() }

	/* agent.(*Agent).runHook -> applyFenced: a hook's commit, fenced with the claim the agent knows
	   -> state.(*Machine) apply -> state.(*txn).checkFence */
	:: d_step { !calm && p_st[s] == RUN && LEADER_UP && p_hold[s] ->
		commit(p_u[s], p_m[s], p_ep[s]);
		printf("OP commit m=%d unit=%d epoch=%d res=%d\n", p_m[s], p_u[s], p_ep[s], r);
		if :: r != R_OK -> p_hold[s] = false :: else fi; /* runUnit stops the unit's hooks */
		dump_state(); after()
	}

	/* agent.(*Agent).tendLease -> state.(*txn).claimLease (fenced): take a free or lapsed lease, or renew it */
	:: d_step { p_st[s] == RUN && LEADER_UP && p_hold[s] &&
#ifdef MUTATE_RAFTLEASE
	   (l_unit == NONE || !l_valid || l_unit == p_u[s] || p_m[s] == rl) &&
#else
	   (l_unit == NONE || !l_valid || l_unit == p_u[s]) &&
#endif
	   !(calm && l_valid && l_unit == p_u[s] && p_bel[s]) ->
		claim_lease(p_u[s], p_m[s], p_ep[s]);
		printf("OP lease m=%d unit=%d epoch=%d res=%d\n", p_m[s], p_u[s], p_ep[s], r);
		if
		:: r == R_OK -> p_bel[s] = true
		:: r == R_FENCED -> p_hold[s] = false
		:: else
		fi;
		dump_state(); after()
	}

	/* agent.(*Agent).tendLease: another unit's lease runs, or the pod no longer holds its unit: no more the leader */
	:: d_step { p_st[s] == RUN && p_bel[s] && (l_unit != p_u[s] || !p_hold[s]) -> p_bel[s] = false; after() }

	/* raftstore.(*Node).admit: a member that finds the group (discovery answers) and is not in its
	   configuration joins: older incarnations of its pod and members at its address are removed,
	   and it is added as a non-voter */
	:: d_step { p_st[s] == RUN && !inconf[p_m[s]] && disc && LEADER_UP ->
		x = p_m[s];
		for (k : 0 .. MAXM-1) {
			if
			:: inconf[k] && k != x && (m_pod[k] == m_pod[x] || m_addr[k] == m_addr[x]) ->
				assert(k != rl); inconf[k] = false; voter[k] = false
			:: else
			fi
		}
		inconf[x] = true;
#ifdef MUTATE_JOINVOTER
		voter[x] = true;
#else
		voter[x] = false;
#endif
		printf("MEM join m=%d\n", x);
		after()
	}

	/* raft replication: a running member catches up with the leader's log */
	:: d_step { p_st[s] == RUN && inconf[p_m[s]] && !caught[p_m[s]] && LEADER_UP -> caught[p_m[s]] = true; after() }

	/* the pod is paused (SIGSTOP, or cut off from the others) ... */
	:: d_step { FAULT && p_st[s] == RUN -> p_st[s] = PAUSED; faults++; after() }
	/* ... and resumes */
	:: d_step { p_st[s] == PAUSED -> p_st[s] = RUN; after() }

	/* the pod is killed; a Deployment pod's disk (its member) goes with it */
	:: d_step { FAULT && p_st[s] != DEAD && (ORD || MAJORITY_KEPT(p_m[s])) ->
		p_st[s] = DEAD; p_hold[s] = false; p_bel[s] = false; faults++; after()
	}

	/* the pod stops gracefully: sidecar.(*Sidecar).shutdown releases its unit (state.(*txn).releaseUnit,
	   expecting itself); a pod without an ordinal leaves (raftstore.(*Node).leave, refused unless the
	   running voters keep a quorum) */
	:: d_step { FAULT && p_st[s] == RUN && LEADER_UP && p_m[s] != rl && (ORD || MAJORITY_KEPT(p_m[s])) ->
		x = p_m[s];
		if
		:: p_u[s] != NONE ->
			release_unit(p_u[s], x);
			printf("OP release unit=%d expect=%d res=%d\n", p_u[s], x, r); dump_state()
		:: else
		fi;
#ifndef STATEFULSET
		if
		:: !voter[x] || nrun - 1 >= (nvot - 1) / 2 + 1 -> inconf[x] = false; voter[x] = false; printf("MEM leave m=%d\n", x)
		:: else
		fi;
#endif
		p_st[s] = DEAD; p_hold[s] = false; p_bel[s] = false; faults++; after()
	}

#ifdef STATEFULSET
	/* the pod comes back: same name, same disk, same member (at another address, maybe: raftstore's
	   address book learns it, the configuration does not change) */
	:: d_step { p_st[s] == DEAD ->
		p_st[s] = RUN; p_u[s] = NONE; p_ep[s] = 0; p_hold[s] = false; p_lost[s] = false; p_bel[s] = false; after()
	}
	/* the pod's disk is wiped: it comes back with its name and address as a new incarnation
	   (raftstore/identity.go) */
	:: d_step { FAULT && nm < MAXM && MAJORITY_KEPT(p_m[s]) -> x = m_addr[p_m[s]]; incarnate(s, p_name[s], x); faults++; after() }
	/* calm: a pod whose unit an operator removed is restarted */
	:: d_step { calm && p_st[s] == RUN && p_lost[s] -> p_u[s] = NONE; p_ep[s] = 0; p_hold[s] = false; p_lost[s] = false; p_bel[s] = false; after() }
#else
	/* the Deployment replaces the pod: a new name, a new member, at a new address or one a dead pod had */
	:: d_step { p_st[s] == DEAD && np < MAXP && nm < MAXM && ADDRFREE(0) -> incarnate(s, np, 0); np++; after() }
	:: d_step { p_st[s] == DEAD && np < MAXP && nm < MAXM && ADDRFREE(1) -> incarnate(s, np, 1); np++; after() }
	:: d_step { p_st[s] == DEAD && np < MAXP && nm < MAXM && ADDRFREE(2) -> incarnate(s, np, 2); np++; after() }
	:: d_step { p_st[s] == DEAD && np < MAXP && nm < MAXM && ADDRFREE(3) -> incarnate(s, np, 3); np++; after() }
	/* calm: a pod whose unit an operator removed is deleted (and replaced) */
	:: d_step { calm && p_st[s] == RUN && p_lost[s] && MAJORITY_KEPT(p_m[s]) -> p_st[s] = DEAD; p_hold[s] = false; p_bel[s] = false; after() }
#endif
	od
}

/* ================= the raft leader's duties for one member, and raft's elections ================= */
proctype member(byte mm) {
end:
	do
	/* raftstore.plan step 2/4 (raftstore.(*Node).reconcile): promote a healthy, caught-up non-voter while
	   the voters are fewer than --voters or one of them is dead */
	:: d_step { LEADER_UP && inconf[mm] && !voter[mm] && MRUN(mm) && caught[mm] && (nvot < TARGET || nrun < nvot) ->
		voter[mm] = true; printf("MEM promote m=%d\n", mm); after()
	}
	/* raftstore.plan step 3: demote a dead voter while there are more voters than --voters (safeToDrop) */
	:: d_step { LEADER_UP && inconf[mm] && voter[mm] && !MRUN(mm) && nvot > TARGET && nrun >= (nvot - 1) / 2 + 1 ->
		voter[mm] = false; printf("MEM demote m=%d\n", mm); after()
	}
	/* raftstore.plan step 5: remove a non-voter unhealthy for --dead-member-after (step 1, a superseded
	   incarnation, is admit's work in this model: it never outlives the newer one's join) */
	:: d_step { LEADER_UP && inconf[mm] && !voter[mm] && !MRUN(mm) ->
		inconf[mm] = false; printf("MEM remove m=%d\n", mm); after()
	}
	/* sidecar.(*Sidecar).reapOnce: a waiting claimant that is no member -> state.(*txn).forgetClaimant */
	:: d_step { LEADER_UP && claimant[mm] && !inconf[mm] ->
		claimant[mm] = false; printf("OP forget m=%d\n", mm); dump_state(); after()
	}
	/* raft: an election while the leader is gone (a majority of the voters runs; only voters vote) */
	:: d_step { inconf[mm] && voter[mm] && MRUN(mm) && mm != rl && !LEADER_UP && nrun >= nvot / 2 + 1 ->
		rl = mm; printf("MEM leader m=%d\n", mm); after()
	}
	/* a fault: leadership moves anyway (raft's leadership transfer, an election timeout) */
	:: d_step { FAULT && inconf[mm] && voter[mm] && MRUN(mm) && mm != rl && LEADER_UP ->
		rl = mm; faults++; printf("MEM leader m=%d\n", mm); after()
	}
	od
}

/* ================= the leader's and the operator's unit duties for one unit ================= */
proctype unit(byte un) {
end:
	do
	/* sidecar.(*Sidecar).reapOnce: a unit claimed without an ordinal whose holder is unreachable
	   (--unit-release-after, or --unit-takeover-after while a pod waits) -> state.(*txn).releaseUnit,
	   a compare-and-set on the holder */
#ifndef MUTATE_NORELEASE
	:: d_step { LEADER_UP && u_st[un] == U_ACTIVE && !u_ord[un] && !MRUN(u_m[un]) ->
		x = u_m[un]; release_unit(un, x);
		printf("OP release unit=%d expect=%d res=%d\n", un, x, r); dump_state(); after()
	}
#endif
	/* sidecar.(*Sidecar).reapOnce: the leader sees the unit released for --unit-remove-after ... */
	:: d_step { LEADER_UP && u_st[un] == U_RELEASED && !rdec[un] ->
		rdec[un] = true; seenok[un] = true; printf("OP seen unit=%d\n", un); after()
	}
	/* ... and removes it: state.(*txn).removeUnit with OnlyReleasedBefore, a compare-and-set */
	:: d_step { LEADER_UP && rdec[un] ->
		remove_unit(un, 1); printf("OP remove unit=%d mode=1 res=%d\n", un, r); rdec[un] = false; seenok[un] = false; dump_state(); after()
	}
	/* an operator: `bagkeeper unit remove` (released only, mode 2) or with --force (mode 0)
	   -> sidecar.(*adminServer).RemoveUnit -> state.(*txn).removeUnit */
	:: d_step { FAULT && LEADER_UP && (u_st[un] == U_ACTIVE || u_st[un] == U_RELEASED) ->
		remove_unit(un, 0); printf("OP remove unit=%d mode=0 res=%d\n", un, r); faults++; dump_state(); after() }
	:: d_step { FAULT && LEADER_UP && (u_st[un] == U_ACTIVE || u_st[un] == U_RELEASED) ->
		remove_unit(un, 2); printf("OP remove unit=%d mode=2 res=%d\n", un, r); faults++; dump_state(); after() }
	od
}

/* ================= the rest of the world ================= */
init {
	byte i;
	d_step {
		for (i : 0 .. NPOD-1) {
			/* NPOD pods bootstrapped the group: members 0..NPOD-1, all voters; member 0 leads */
			p_st[i] = RUN; p_m[i] = i; p_name[i] = i; p_u[i] = NONE;
			m_pod[i] = i; m_addr[i] = i; mslot[i] = i;
			inconf[i] = true; voter[i] = true; caught[i] = true
		}
		for (i : NPOD .. MAXM-1) { mslot[i] = NONE }
		for (i : 0 .. MAXU-1) { lastcm[i] = NONE }
		i = 0;
		dump_state(); after()
	};
	atomic {
		for (i : 0 .. NPOD-1) { run pod(i) }
		for (i : 0 .. MAXM-1) { run member(i) }
		for (i : 0 .. MAXU-1) { run unit(i) }
		i = 0
	}
end:
	do
	/* the lease runs out: nobody renews it (its unit's holder is paused, dead, or holds it no more) */
	:: d_step { l_unit != NONE && l_valid &&
	   !(u_st[l_unit] == U_ACTIVE && MRUN(u_m[l_unit]) && p_hold[mslot[u_m[l_unit]]] && p_u[mslot[u_m[l_unit]]] == l_unit) ->
		l_valid = false;
		for (k : 0 .. NPOD-1) { p_bel[k] = false } /* is-leader promises only what the lease still has */
		printf("OP expire\n"); dump_state(); after()
	}
	/* discovery answers nothing (DNS, the peers file, the static list): nobody can join; and answers again */
	:: d_step { FAULT && disc -> disc = false; faults++ }
	:: !disc -> disc = true
	/* the calm: no more faults; every pod eventually runs and is connected */
#ifdef LATE_CALM
	:: !calm && faults >= FAULTS -> calm = true /* simulations: every fault first */
#else
	:: !calm -> calm = true
#endif
	/* liveness: once calm and nothing is left to do, every declared unit is held by a running pod */
	:: calm && timeout -> d_step {
		tally = 0;
		for (k : 0 .. MAXU-1) { if :: u_st[k] == U_ACTIVE && MRUN(u_m[k]) -> tally++ :: else fi }
#ifdef STATEFULSET
		assert(tally == NPOD);
#else
		assert(tally == SCALE);
#endif
		printf("CALM held=%d\n", tally);
		calm_over = true
	};
		break
	od
}

#ifdef CALM_ENDS
/* every calm run ends (pan -a): no cycle of transitions that never reaches the end of the calm, so
   that the check at its end covers every run */
ltl calm_ends { [] (calm -> <> calm_over) }
#endif
