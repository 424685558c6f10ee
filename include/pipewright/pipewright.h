#pragma once
// pipewright's public API in one include. A program describes its model (model.h, layers.h),
// fills a JobConfig (job_config.h) and calls run_job (fit.h), or feeds its own batches a step at a
// time (job.h); the same program runs embedded
// (ranks as threads) or as one rank of a job that `pipewright launch`, srun, mpirun or a
// torchrun-style launcher started. Link pipewright::pipewright (find_package(pipewright)).
#include "pipewright/checkpoint.h"
#include "pipewright/dataset.h"
#include "pipewright/error.h"
#include "pipewright/fit.h"
#include "pipewright/job.h"
#include "pipewright/job_config.h"
#include "pipewright/layers.h"
#include "pipewright/log.h"
#include "pipewright/loss.h"
#include "pipewright/metrics.h"
#include "pipewright/model.h"
#include "pipewright/version.h"
#include "pipewright/weights.h"
