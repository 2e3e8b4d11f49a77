/// @file
/// nn/nn.h: everything in nn/ -- modules, layers, losses, optimizers, data and checkpoints.
#pragma once

#include <ringgrad/nn/activation.h>
#include <ringgrad/nn/checkpoint.h>
#include <ringgrad/nn/data/dataloader.h>
#include <ringgrad/nn/data/distributed_sampler.h>
#include <ringgrad/nn/data/fashion_mnist.h>
#include <ringgrad/nn/data/idx.h>
#include <ringgrad/nn/embedding.h>
#include <ringgrad/nn/init.h>
#include <ringgrad/nn/layernorm.h>
#include <ringgrad/nn/linear.h>
#include <ringgrad/nn/loss.h>
#include <ringgrad/nn/module.h>
#include <ringgrad/nn/optim/adam.h>
#include <ringgrad/nn/optim/clip_grad_norm.h>
#include <ringgrad/nn/optim/lr_scheduler.h>
#include <ringgrad/nn/optim/optimizer.h>
#include <ringgrad/nn/optim/sgd.h>
#include <ringgrad/nn/safetensors.h>
#include <ringgrad/nn/sequential.h>
#include <ringgrad/nn/transformer.h>

/// @namespace ringgrad::nn
/// Modules (Module, Linear, LayerNorm, Sequential, the activations), losses, checkpoints and
/// safetensors files, as PyTorch's torch.nn.

/// @namespace ringgrad::nn::optim
/// Optimizers (SGD, Adam, AdamW), learning-rate schedulers and clip_grad_norm_, as torch.optim.

/// @namespace ringgrad::nn::data
/// Datasets (Fashion-MNIST, IDX files), the DataLoader and samplers, as torch.utils.data.

/// @namespace ringgrad::nn::init
/// Parameter initialisation, as torch.nn.init.
