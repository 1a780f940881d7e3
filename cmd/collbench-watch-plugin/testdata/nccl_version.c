// nccl_version.c: a stand-in for libnccl.so.2 that only says its version
// (NCCL 2.30.7), for the plugin's record of which NCCL a process runs.
int ncclGetVersion(int *version) {
	*version = 23007;
	return 0;
}
