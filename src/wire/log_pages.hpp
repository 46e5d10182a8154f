// Moved to the public include/nvtcp/log_pages.hpp; this forward goes once every include names that.
#pragma once
#include "nvtcp/log_pages.hpp"
