package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"collbench/internal/bounded"
	"collbench/measure"
	"collbench/watch"
)

// TuneFrom is what a job issued, read from collbench watch's record
// (-o): the collectives a tuner can choose for, the sizes in collbench's
// terms (a row's size: allgather and reduce-scatter count every rank's
// part), the most called element type, and the communicator's rank count.
type TuneFrom struct {
	Collectives []measure.Collective
	Sizes       []int64
	DType       string
	Ranks       int
	// Notes say what the record held that tune leaves out.
	Notes []string
}

// ncclFuncs maps NCCL's function names, as its profiler gives them, to
// the collectives tune can force.
var ncclFuncs = map[string]measure.Collective{"AllReduce": measure.AllReduce, "AllGather": measure.AllGather,
	"ReduceScatter": measure.ReduceScatter, "Broadcast": measure.Broadcast, "Reduce": measure.Reduce}

// ncclTypes maps NCCL's element type names to collbench's.
var ncclTypes = map[string]string{"ncclInt8": "int8", "ncclUint8": "uint8", "ncclInt32": "int32", "ncclUint32": "uint32",
	"ncclInt64": "int64", "ncclUint64": "uint64", "ncclFloat16": "half", "ncclFloat32": "float", "ncclFloat64": "double",
	"ncclBfloat16": "bfloat16", "ncclFloat8e4m3": "f8e4m3", "ncclFloat8e5m2": "f8e5m2"}

// ReadTuneFrom reads a watch record and says what tune should measure:
// every collective and size the job issued on its largest communicator
// (most ranks, then most calls). A file that is no watch record, or one
// that holds no collective tune can choose for, is a UsageError.
func ReadTuneFrom(ctx context.Context, path string) (*TuneFrom, error) {
	data, err := bounded.ReadFile(ctx, path, bounded.Results)
	if err != nil {
		return nil, UsageErrorf("--from %s: %v", path, err)
	}
	var rec watch.Record
	if err := json.Unmarshal(data, &rec); err != nil || rec.Schema != watch.RecordSchema {
		return nil, UsageErrorf("--from %s is not a record of collbench watch (-o): give the JSON collbench watch wrote", path)
	}
	byComm := map[string][]watch.OpStat{}
	var comms []string
	for _, o := range rec.Counts.Ops {
		if _, ok := byComm[o.Comm]; !ok {
			comms = append(comms, o.Comm)
		}
		byComm[o.Comm] = append(byComm[o.Comm], o)
	}
	if len(comms) == 0 {
		return nil, UsageErrorf("--from %s holds no collectives: the job's collectives were not recorded (a plugin from before collbench recorded them, or no collective finished); run the job under collbench watch -o again", path)
	}
	calls := func(c string) (ranks int, n uint64) {
		for _, o := range byComm[c] {
			ranks, n = o.Ranks, n+o.Calls
		}
		return ranks, n
	}
	slices.SortStableFunc(comms, func(a, b string) int {
		ra, na := calls(a)
		rb, nb := calls(b)
		if ra != rb {
			return rb - ra
		}
		return int(nb) - int(na) //nolint:gosec // G115: call counts far below 2^62
	})
	tf := &TuneFrom{}
	if len(comms) > 1 {
		tf.Notes = append(tf.Notes, fmt.Sprintf("the record holds %d communicators: tuning the one of the most ranks and calls (%s)", len(comms), comms[0]))
	}
	types := map[string]uint64{}
	var other []string
	for _, o := range byComm[comms[0]] {
		tf.Ranks = o.Ranks
		c, ok := ncclFuncs[o.Func]
		t, known := ncclTypes[o.DType]
		if !ok || !known {
			other = append(other, o.Func+" "+o.DType)
			continue
		}
		types[t] += o.Calls
		if !slices.Contains(tf.Collectives, c) {
			tf.Collectives = append(tf.Collectives, c)
		}
		dts, err := measure.ParseDTypes(t)
		if err != nil {
			continue
		}
		size := o.Count * int64(dts[0].Size())
		if c == measure.AllGather || c == measure.ReduceScatter {
			size *= int64(o.Ranks)
		}
		if !slices.Contains(tf.Sizes, size) {
			tf.Sizes = append(tf.Sizes, size)
		}
	}
	if len(tf.Collectives) == 0 {
		return nil, UsageErrorf("--from %s: the job issued no collective tune can choose for (it issued %s)", path, strings.Join(other, ", "))
	}
	if len(other) > 0 {
		tf.Notes = append(tf.Notes, "left out, with no choice to tune: "+strings.Join(other, ", "))
	}
	slices.Sort(tf.Sizes)
	for t, n := range types {
		if tf.DType == "" || n > types[tf.DType] || (n == types[tf.DType] && t < tf.DType) {
			tf.DType = t
		}
	}
	if len(types) > 1 {
		tf.Notes = append(tf.Notes, fmt.Sprintf("the job used %d element types: tuning %s, the most called", len(types), tf.DType))
	}
	return tf, nil
}
