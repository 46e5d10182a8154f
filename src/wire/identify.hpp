// Moved to the public include/nvtcp/identify.hpp; this forward goes once every include names that.
#pragma once
#include "nvtcp/identify.hpp"
