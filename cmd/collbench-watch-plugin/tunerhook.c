// tunerhook.c: the library also carries collbench's NCCL tuner plugin
// (backend/nccl/tuner: ncclTunerPlugin_v4), so that one library, one Go
// runtime, serves an application as its profiler and its tuner
// (NCCL_TUNER_PLUGIN set to the library's path). At each communicator's
// init the tuner first calls the hook registered here, which has the Go
// side read the tuner file once (COLLBENCH_TUNER_FILE): nothing is read
// unless NCCL loads the tuner.
#include "_cgo_export.h"
#include "tuner.h"

static void cbw_tuner_hook(void) { cbwTunerLoad(); }

__attribute__((constructor)) static void cbw_tuner_register(void) { cbt_set_init_hook(cbw_tuner_hook); }
