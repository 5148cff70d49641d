package standby

import (
	"container/heap"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// idleItem is what the idle loop knows of one labelled instance: the
// catalog's latest view of it, when it last saw requests in flight, and
// when to look at it again.
type idleItem struct {
	s    catalog.Sleeper
	busy time.Time // when the loop last saw requests in flight
	due  time.Time // when to look again, while index >= 0
	// index is the item's place in the queue's heap (-1: not there).
	index int
}

// idleQueue is the idle loop's state (R5l): every labelled instance of
// the catalog by ID and by Activity, those with a deadline in a heap by
// it, those held up by their dependents (R5k), the instances with a
// caddy.depends_on, and the dependencies the catalog gave some of them
// during the loop's current pass. The loop's alone.
type idleQueue struct {
	byID       map[string]*idleItem
	byAct      map[*catalog.Activity]*idleItem
	items      []*idleItem // the heap
	held       map[string]*idleItem
	dependents map[string]catalog.Dependent
	// keeps are the IDs each dependent keeps up (R5k, dependedOn), by its
	// ID: at most one entry per dependent, of catalog.MaxDependencies IDs,
	// emptied at each pass (newPass) since any change of the catalog may
	// change them.
	keeps map[string][]string
}

func newIdleQueue() *idleQueue {
	return &idleQueue{byID: map[string]*idleItem{}, byAct: map[*catalog.Activity]*idleItem{},
		held: map[string]*idleItem{}, dependents: map[string]catalog.Dependent{}, keeps: map[string][]string{}}
}

// newPass forgets the dependencies asked of the catalog in the last pass.
func (q *idleQueue) newPass() {
	if len(q.keeps) > bigBuffer {
		q.keeps = map[string][]string{} // a Go map keeps its size
		return
	}
	clear(q.keeps)
}

// add starts following the instance s.
func (q *idleQueue) add(s catalog.Sleeper) *idleItem {
	it := &idleItem{s: s, index: -1}
	q.byID[s.ID] = it
	q.byAct[s.Activity] = it
	return it
}

// update takes the catalog's new view of it.
func (q *idleQueue) update(it *idleItem, s catalog.Sleeper) {
	if it.s.Activity != s.Activity {
		delete(q.byAct, it.s.Activity)
		q.byAct[s.Activity] = it
	}
	it.s = s
}

// drop stops following it.
func (q *idleQueue) drop(it *idleItem) {
	q.unschedule(it)
	delete(q.held, it.s.ID)
	delete(q.byID, it.s.ID)
	delete(q.byAct, it.s.Activity)
}

// schedule sets it to be looked at at due.
func (q *idleQueue) schedule(it *idleItem, due time.Time) {
	it.due = due
	if it.index >= 0 {
		heap.Fix(q, it.index)
		return
	}
	heap.Push(q, it)
}

// unschedule clears its deadline, if set.
func (q *idleQueue) unschedule(it *idleItem) {
	if it.index >= 0 {
		heap.Remove(q, it.index)
	}
}

// peek is the item with the earliest deadline, nil if none.
func (q *idleQueue) peek() *idleItem {
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0]
}

// heap.Interface, by deadline.
func (q *idleQueue) Len() int           { return len(q.items) }
func (q *idleQueue) Less(i, j int) bool { return q.items[i].due.Before(q.items[j].due) }

func (q *idleQueue) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].index = i
	q.items[j].index = j
}

func (q *idleQueue) Push(x any) {
	it := x.(*idleItem)
	it.index = len(q.items)
	q.items = append(q.items, it)
}

func (q *idleQueue) Pop() any {
	n := len(q.items) - 1
	it := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	it.index = -1
	return it
}
