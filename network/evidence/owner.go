package evidence

// The CNI_ARGS berth adds to every attachment it makes. libcni keeps them
// in the attachment's cache entry, which is how berth later tells its own
// attachments from other runtimes' and from another berth's.
const (
	// ArgID is the attachment's ID; berth sets it to the container ID.
	ArgID = "BERTH_ID"
	// ArgStore identifies the store (data dir) of the berth that made the
	// attachment (store.IDFor): several berths may share a host.
	ArgStore = "BERTH_STORE"
)

// MarkArgs adds berth's ownership markers to args for attachment id made
// by the berth whose store is storeID (none when storeID is empty). It
// returns a new map; args is not changed. A marker in args is overwritten:
// the caller's extra arguments never decide ownership.
func MarkArgs(args map[string]string, id, storeID string) map[string]string {
	out := make(map[string]string, len(args)+2)
	for k, v := range args {
		out[k] = v
	}
	out[ArgID] = id
	if storeID != "" {
		out[ArgStore] = storeID
	}
	return out
}

// Ownership says whose an attachment is.
type Ownership int

const (
	// Foreign: another runtime's (no berth marker, or one berth never
	// writes). Never berth's to reclaim unless an operator says so.
	Foreign Ownership = iota
	// OtherBerth: made by a berth with another store (data dir).
	OtherBerth
	// Mine: made by the berth whose store was asked about.
	Mine
)

func (o Ownership) String() string {
	switch o {
	case Mine:
		return "berth's"
	case OtherBerth:
		return "another berth's"
	default:
		return "another runtime's"
	}
}

// Owned is the one ownership test: whose is the attachment a cache entry
// records, asked by the berth whose store is storeID.
//
// An entry is berth's when its ArgID names the entry's own container ID,
// which is what MarkArgs writes. It is another berth's when it carries an
// ArgStore that differs from storeID. An entry without ArgStore (made by a
// berth that did not write it) and any berth entry asked about without a
// storeID count as the asker's: those are the cases where no other store
// can be proven.
func Owned(e CacheEntry, storeID string) Ownership {
	if id := e.Args[ArgID]; id == "" || id != e.ContainerID {
		return Foreign
	}
	if s := e.Args[ArgStore]; s != "" && storeID != "" && s != storeID {
		return OtherBerth
	}
	return Mine
}
