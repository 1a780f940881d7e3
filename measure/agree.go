package measure

import "encoding/json"

// Agree makes every process of ctl hold rank 0's value of v (a pointer):
// rank 0 decides, every other process takes its decision. A nil control
// (a world of one process) keeps v as it is.
func Agree(ctl Control, v any) error {
	if ctl == nil || ctl.Size() < 2 {
		return nil
	}
	var mine []byte
	if ctl.Rank() == 0 {
		var err error
		if mine, err = json.Marshal(v); err != nil {
			return err
		}
	}
	all, err := ctl.AllGather(mine)
	if err != nil {
		return err
	}
	return json.Unmarshal(all[0], v)
}

// ControlOf is w's control where w spans several processes, else nil.
func ControlOf(w World) Control {
	if d, ok := w.(Distributed); ok {
		return d.Control()
	}
	return nil
}
