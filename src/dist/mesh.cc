// DTP's mesh (include/mtc/dtp.h, Mesh; docs/dtp.md, "Mesh"): the ranks of a job cut into
// partition groups of t contiguous ranks, each a Group like make_group's, and the
// communicator that joins the ranks with the same index in every group, over which data
// parallel runs across the groups (GradReducer averages there).
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/communicator.h"
#include "dist/dtp.h"
#include "mtc/status.h"

namespace mtc::dtp {

absl::StatusOr<Mesh> make_mesh(dist::CommPtr world, int t, bool check, BatchNormStats bn) {
  if (world == nullptr) return absl::InvalidArgumentError("make_mesh: no communicator");
  const int n = world->world_size();
  if (t < 1 || n % t != 0) {
    std::vector<int> divisors;
    for (int d = 1; d <= n; ++d) {
      if (n % d == 0) divisors.push_back(d);
    }
    return absl::InvalidArgumentError(absl::StrCat("--dtp_group=", t, ": expected a divisor of the ", n,
                                                   n == 1 ? " rank" : " ranks", " (",
                                                   absl::StrJoin(divisors, ", "), ")"));
  }
  const int rank = world->rank();
  Mesh m;
  m.world = world;
  m.groups = n / t;
  m.group_index = rank / t;
  // Both splits are made on every rank in the same order (each is collective over world).
  MTC_ASSIGN_OR_RETURN(dist::CommPtr group_comm, world->split(/*color=*/rank / t, /*key=*/rank % t));
  MTC_ASSIGN_OR_RETURN(m.across, world->split(/*color=*/rank % t, /*key=*/rank / t));
  if (group_comm->world_size() != t || group_comm->rank() != rank % t || m.across->world_size() != m.groups ||
      m.across->rank() != m.group_index) {
    return absl::InternalError(absl::StrCat("make_mesh: rank ", rank, " got rank ", group_comm->rank(), " of ",
                                            group_comm->world_size(), " in its group and ", m.across->rank(),
                                            " of ", m.across->world_size(), " across groups, expected ", rank % t,
                                            " of ", t, " and ", m.group_index, " of ", m.groups));
  }
  m.group = make_group(std::move(group_comm), check, bn);
  return m;
}

}  // namespace mtc::dtp
