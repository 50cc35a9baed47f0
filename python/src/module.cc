// The Python module cc_torch._C: the ProcessGroupCC class and the creator function that
// cc_torch/__init__.py registers with torch.distributed as the backend "cc".
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.h"

namespace py = pybind11;
using cc::torch_backend::ProcessGroupCC;

PYBIND11_MODULE(_C, module) {
  module.doc() = "cc's torch.distributed backend (import cc_torch to register it as \"cc\")";
  // The base class must be known to pybind11 before a class derives from it.
  py::module::import("torch.distributed");
  py::class_<ProcessGroupCC, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupCC>>(
      module, "ProcessGroupCC")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupCC>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  int version = 0;
  ccGetVersion(&version);
  module.attr("cc_version") = version;
}
