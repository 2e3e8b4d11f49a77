// nn/nn.h: everything in nn/ -- modules, layers, losses, optimizers, data and checkpoints.
#pragma once

#include "nn/activation.h"
#include "nn/init.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/sequential.h"
