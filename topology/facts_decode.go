package topology

import "collbench/internal/jsonwords"

// DecodeFacts reads a host's GPU facts as topo --record writes them; an
// error says what in the file is wrong, in a user's words.
func DecodeFacts(b []byte) (*Facts, error) {
	var f Facts
	if err := jsonwords.Decode(b, &f); err != nil {
		return nil, err
	}
	return &f, nil
}
