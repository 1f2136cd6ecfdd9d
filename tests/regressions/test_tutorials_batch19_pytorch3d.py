"""PyTorch3D's pure-PyTorch geometry code run on Lucid (``import lucid as torch``), batch 19:

- facebookresearch/pytorch3d ``pytorch3d/transforms/rotation_conversions.py``: ``quaternion_to_matrix``,
  ``matrix_to_quaternion`` (``_sqrt_positive_part``'s masked in-place write under autograd, the four
  candidates picked through ``F.one_hot(argmax) > 0.5`` boolean indexing), ``_axis_angle_rotation``,
  ``euler_angles_to_matrix``/``matrix_to_euler_angles`` (all twelve conventions), ``random_quaternions``/
  ``random_rotations`` (``_copysign``), ``standardize_quaternion``, ``quaternion_raw_multiply``/
  ``quaternion_multiply``/``quaternion_invert``/``quaternion_apply``, the axis-angle conversions (the
  quaternion route and the ``fast`` Rodrigues route with ``torch.sinc``, ``torch.where(isclose)`` and the
  near-pi branch), ``rotation_6d_to_matrix``/``matrix_to_rotation_6d``.
- ``transforms/math.py``'s ``acos_linear_extrapolation``; ``transforms/so3.py``: ``so3_exp_map``,
  ``so3_log_map``, ``so3_rotation_angle``, ``so3_relative_angle``, ``hat``/``hat_inv``; ``transforms/se3.py``:
  ``se3_exp_map``/``se3_log_map`` (``_se3_V_matrix``, ``torch.linalg.solve`` as ``common/compat.py``'s
  ``solve``).
- ``transforms/transform3d.py``: ``Transform3d`` (``compose``, ``get_matrix``, ``inverse`` both ways,
  ``stack``, ``transform_points`` with ``eps``, ``transform_normals``), ``Translate``, ``Scale``, ``Rotate``,
  ``RotateAxisAngle`` and their helpers (``_handle_input``, ``_broadcast_bmm``, ``_check_valid_rotation_matrix``).
- ``ops/utils.py`` (``wmean``, ``eyes``, ``convert_pointclouds_to_tensor``), ``ops/points_alignment.py``:
  ``corresponding_points_alignment`` (Umeyama through ``torch.svd`` with weights, list weights, scale and the
  reflection fix through ``torch.det``) and ``iterative_closest_point``; ``structures/utils.py``:
  ``list_to_padded``, ``padded_to_list``, ``list_to_packed``, ``packed_to_list``, ``padded_to_packed``.
- ``renderer/cameras.py``: ``camera_position_from_spherical_angles``, ``look_at_rotation``,
  ``look_at_view_transform``, ``get_world_to_view_transform`` with ``renderer/utils.py``'s
  ``format_tensor``/``convert_to_tensors_and_broadcast``.

Data are synthetic and sizes tiny. Each page is a function of the module it is handed as ``torch``; every
check recomputes its numbers in NumPy (Hamilton products, Rodrigues' formula, a Taylor matrix exponential,
Umeyama with ``np.linalg.svd``), a closed form (a quarter turn about an axis, the camera centre mapped to
the view origin), a round trip, or float64 central differences; the ``*_torch_parity`` tests run the same
text on PyTorch with the same data.

Adapted: ``knn_points`` is a compiled kernel, so ``iterative_closest_point`` gets a plain-PyTorch one
(``cdist`` + ``topk``, homogeneous clouds only: ``lengths`` are ignored); ``Pointclouds`` inputs are left out
(tensors only); the device defaults (``device="cpu"``) are passed the data's device, so the pages also run
on a non-CPU default device; ``look_at_rotation`` calls ``torch.cross(..., dim=1)`` as the current
PyTorch3D does (the older text's ``torch.cross`` without ``dim`` takes the first axis of size 3, the
batch axis for three cameras, in both libraries). The NumPy Umeyama follows ``points_alignment.py`` in
multiplying the centred points by the weights, so the weights enter the covariances squared.

Fixed on the way: ``F.one_hot``'s out-of-range message named the op twice (``one_hot: one_hot: class values
must be in [0, 4) ...``): the kernel's own prefix and the one ``bind`` adds.
"""
import itertools
import math
import warnings
from types import SimpleNamespace
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401


def _np(t):
    return np.array(t.detach().cpu().numpy(), dtype=np.float64)  # a copy: .numpy() shares memory


# ====================================================================== transforms/rotation_conversions.py
def rotations_page(torch):
    F = torch.nn.functional
    Device = Union[str, torch.device]

    def quaternion_to_matrix(quaternions: torch.Tensor) -> torch.Tensor:
        r, i, j, k = torch.unbind(quaternions, -1)
        two_s = 2.0 / (quaternions * quaternions).sum(-1)

        o = torch.stack(
            (
                1 - two_s * (j * j + k * k),
                two_s * (i * j - k * r),
                two_s * (i * k + j * r),
                two_s * (i * j + k * r),
                1 - two_s * (i * i + k * k),
                two_s * (j * k - i * r),
                two_s * (i * k - j * r),
                two_s * (j * k + i * r),
                1 - two_s * (i * i + j * j),
            ),
            -1,
        )
        return o.reshape(quaternions.shape[:-1] + (3, 3))

    def _copysign(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        signs_differ = (a < 0) != (b < 0)
        return torch.where(signs_differ, -a, a)

    def _sqrt_positive_part(x: torch.Tensor) -> torch.Tensor:
        ret = torch.zeros_like(x)
        positive_mask = x > 0
        if torch.is_grad_enabled():
            ret[positive_mask] = torch.sqrt(x[positive_mask])
        else:
            ret = torch.where(positive_mask, torch.sqrt(x), ret)
        return ret

    def matrix_to_quaternion(matrix: torch.Tensor) -> torch.Tensor:
        if matrix.size(-1) != 3 or matrix.size(-2) != 3:
            raise ValueError(f"Invalid rotation matrix shape {matrix.shape}.")

        batch_dim = matrix.shape[:-2]
        m00, m01, m02, m10, m11, m12, m20, m21, m22 = torch.unbind(
            matrix.reshape(batch_dim + (9,)), dim=-1
        )

        q_abs = _sqrt_positive_part(
            torch.stack(
                [
                    1.0 + m00 + m11 + m22,
                    1.0 + m00 - m11 - m22,
                    1.0 - m00 + m11 - m22,
                    1.0 - m00 - m11 + m22,
                ],
                dim=-1,
            )
        )

        # we produce the desired quaternion multiplied by each of r, i, j, k
        quat_by_rijk = torch.stack(
            [
                torch.stack([q_abs[..., 0] ** 2, m21 - m12, m02 - m20, m10 - m01], dim=-1),
                torch.stack([m21 - m12, q_abs[..., 1] ** 2, m10 + m01, m02 + m20], dim=-1),
                torch.stack([m02 - m20, m10 + m01, q_abs[..., 2] ** 2, m12 + m21], dim=-1),
                torch.stack([m10 - m01, m20 + m02, m21 + m12, q_abs[..., 3] ** 2], dim=-1),
            ],
            dim=-2,
        )

        # We floor here at 0.1 but the exact level is not important; if q_abs is small,
        # the candidate won't be picked.
        flr = torch.tensor(0.1).to(dtype=q_abs.dtype, device=q_abs.device)
        quat_candidates = quat_by_rijk / (2.0 * q_abs[..., None].max(flr))

        # if not for numerical problems, quat_candidates[i] should be same (up to a sign),
        # forall i; we pick the best-conditioned one (with the largest denominator)
        out = quat_candidates[
            F.one_hot(q_abs.argmax(dim=-1), num_classes=4) > 0.5, :
        ].reshape(batch_dim + (4,))
        return standardize_quaternion(out)

    def _axis_angle_rotation(axis: str, angle: torch.Tensor) -> torch.Tensor:
        cos = torch.cos(angle)
        sin = torch.sin(angle)
        one = torch.ones_like(angle)
        zero = torch.zeros_like(angle)

        if axis == "X":
            R_flat = (one, zero, zero, zero, cos, -sin, zero, sin, cos)
        elif axis == "Y":
            R_flat = (cos, zero, sin, zero, one, zero, -sin, zero, cos)
        elif axis == "Z":
            R_flat = (cos, -sin, zero, sin, cos, zero, zero, zero, one)
        else:
            raise ValueError("letter must be either X, Y or Z.")

        return torch.stack(R_flat, -1).reshape(angle.shape + (3, 3))

    def euler_angles_to_matrix(euler_angles: torch.Tensor, convention: str) -> torch.Tensor:
        if euler_angles.dim() == 0 or euler_angles.shape[-1] != 3:
            raise ValueError("Invalid input euler angles.")
        if len(convention) != 3:
            raise ValueError("Convention must have 3 letters.")
        if convention[1] in (convention[0], convention[2]):
            raise ValueError(f"Invalid convention {convention}.")
        for letter in convention:
            if letter not in ("X", "Y", "Z"):
                raise ValueError(f"Invalid letter {letter} in convention string.")
        matrices = [
            _axis_angle_rotation(c, e)
            for c, e in zip(convention, torch.unbind(euler_angles, -1))
        ]
        # return functools.reduce(torch.matmul, matrices)
        return torch.matmul(torch.matmul(matrices[0], matrices[1]), matrices[2])

    def _angle_from_tan(
        axis: str, other_axis: str, data, horizontal: bool, tait_bryan: bool
    ) -> torch.Tensor:
        i1, i2 = {"X": (2, 1), "Y": (0, 2), "Z": (1, 0)}[axis]
        if horizontal:
            i2, i1 = i1, i2
        even = (axis + other_axis) in ["XY", "YZ", "ZX"]
        if horizontal == even:
            return torch.atan2(data[..., i1], data[..., i2])
        if tait_bryan:
            return torch.atan2(-data[..., i2], data[..., i1])
        return torch.atan2(data[..., i2], -data[..., i1])

    def _index_from_letter(letter: str) -> int:
        if letter == "X":
            return 0
        if letter == "Y":
            return 1
        if letter == "Z":
            return 2
        raise ValueError("letter must be either X, Y or Z.")

    def matrix_to_euler_angles(matrix: torch.Tensor, convention: str) -> torch.Tensor:
        if len(convention) != 3:
            raise ValueError("Convention must have 3 letters.")
        if convention[1] in (convention[0], convention[2]):
            raise ValueError(f"Invalid convention {convention}.")
        for letter in convention:
            if letter not in ("X", "Y", "Z"):
                raise ValueError(f"Invalid letter {letter} in convention string.")
        if matrix.size(-1) != 3 or matrix.size(-2) != 3:
            raise ValueError(f"Invalid rotation matrix shape {matrix.shape}.")
        i0 = _index_from_letter(convention[0])
        i2 = _index_from_letter(convention[2])
        tait_bryan = i0 != i2
        if tait_bryan:
            central_angle = torch.asin(
                matrix[..., i0, i2] * (-1.0 if i0 - i2 in [-1, 2] else 1.0)
            )
        else:
            central_angle = torch.acos(matrix[..., i0, i0])

        o = (
            _angle_from_tan(
                convention[0], convention[1], matrix[..., i2], False, tait_bryan
            ),
            central_angle,
            _angle_from_tan(
                convention[2], convention[1], matrix[..., i0, :], True, tait_bryan
            ),
        )
        return torch.stack(o, -1)

    def random_quaternions(
        n: int, dtype: Optional[torch.dtype] = None, device: Optional[Device] = None
    ) -> torch.Tensor:
        if isinstance(device, str):
            device = torch.device(device)
        o = torch.randn((n, 4), dtype=dtype, device=device)
        s = (o * o).sum(1)
        o = o / _copysign(torch.sqrt(s), o[:, 0])[:, None]
        return o

    def random_rotations(
        n: int, dtype: Optional[torch.dtype] = None, device: Optional[Device] = None
    ) -> torch.Tensor:
        quaternions = random_quaternions(n, dtype=dtype, device=device)
        return quaternion_to_matrix(quaternions)

    def random_rotation(
        dtype: Optional[torch.dtype] = None, device: Optional[Device] = None
    ) -> torch.Tensor:
        return random_rotations(1, dtype, device)[0]

    def standardize_quaternion(quaternions: torch.Tensor) -> torch.Tensor:
        return torch.where(quaternions[..., 0:1] < 0, -quaternions, quaternions)

    def quaternion_raw_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        aw, ax, ay, az = torch.unbind(a, -1)
        bw, bx, by, bz = torch.unbind(b, -1)
        ow = aw * bw - ax * bx - ay * by - az * bz
        ox = aw * bx + ax * bw + ay * bz - az * by
        oy = aw * by - ax * bz + ay * bw + az * bx
        oz = aw * bz + ax * by - ay * bx + az * bw
        return torch.stack((ow, ox, oy, oz), -1)

    def quaternion_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ab = quaternion_raw_multiply(a, b)
        return standardize_quaternion(ab)

    def quaternion_invert(quaternion: torch.Tensor) -> torch.Tensor:
        scaling = torch.tensor([1, -1, -1, -1], device=quaternion.device)
        return quaternion * scaling

    def quaternion_apply(quaternion: torch.Tensor, point: torch.Tensor) -> torch.Tensor:
        if point.size(-1) != 3:
            raise ValueError(f"Points are not in 3D, {point.shape}.")
        real_parts = point.new_zeros(point.shape[:-1] + (1,))
        point_as_quaternion = torch.cat((real_parts, point), -1)
        out = quaternion_raw_multiply(
            quaternion_raw_multiply(quaternion, point_as_quaternion),
            quaternion_invert(quaternion),
        )
        return out[..., 1:]

    def axis_angle_to_matrix(axis_angle: torch.Tensor, fast: bool = False) -> torch.Tensor:
        if not fast:
            return quaternion_to_matrix(axis_angle_to_quaternion(axis_angle))

        shape = axis_angle.shape
        device, dtype = axis_angle.device, axis_angle.dtype

        angles = torch.norm(axis_angle, p=2, dim=-1, keepdim=True).unsqueeze(-1)

        rx, ry, rz = axis_angle[..., 0], axis_angle[..., 1], axis_angle[..., 2]
        zeros = torch.zeros(shape[:-1], dtype=dtype, device=device)
        cross_product_matrix = torch.stack(
            [zeros, -rz, ry, rz, zeros, -rx, -ry, rx, zeros], dim=-1
        ).view(shape + (3,))
        cross_product_matrix_sqrd = cross_product_matrix @ cross_product_matrix

        identity = torch.eye(3, dtype=dtype, device=device)
        angles_sqrd = angles * angles
        angles_sqrd = torch.where(angles_sqrd == 0, 1, angles_sqrd)
        return (
            identity.expand(cross_product_matrix.shape)
            + torch.sinc(angles / torch.pi) * cross_product_matrix
            + ((1 - torch.cos(angles)) / angles_sqrd) * cross_product_matrix_sqrd
        )

    def matrix_to_axis_angle(matrix: torch.Tensor, fast: bool = False) -> torch.Tensor:
        if not fast:
            return quaternion_to_axis_angle(matrix_to_quaternion(matrix))

        if matrix.size(-1) != 3 or matrix.size(-2) != 3:
            raise ValueError(f"Invalid rotation matrix shape {matrix.shape}.")

        omegas = torch.stack(
            [
                matrix[..., 2, 1] - matrix[..., 1, 2],
                matrix[..., 0, 2] - matrix[..., 2, 0],
                matrix[..., 1, 0] - matrix[..., 0, 1],
            ],
            dim=-1,
        )
        norms = torch.norm(omegas, p=2, dim=-1, keepdim=True)
        traces = torch.diagonal(matrix, dim1=-2, dim2=-1).sum(-1).unsqueeze(-1)
        angles = torch.atan2(norms, traces - 1)

        zeros = torch.zeros(3, dtype=matrix.dtype, device=matrix.device)
        omegas = torch.where(torch.isclose(angles, torch.zeros_like(angles)), zeros, omegas)

        near_pi = angles.isclose(angles.new_full((1,), torch.pi)).squeeze(-1)

        axis_angles = torch.empty_like(omegas)
        axis_angles[~near_pi] = (
            0.5 * omegas[~near_pi] / torch.sinc(angles[~near_pi] / torch.pi)
        )

        # this derives from: nnT = (R + 1) / 2
        n = 0.5 * (
            matrix[near_pi][..., 0, :]
            + torch.eye(1, 3, dtype=matrix.dtype, device=matrix.device)
        )
        axis_angles[near_pi] = angles[near_pi] * n / torch.norm(n)

        return axis_angles

    def axis_angle_to_quaternion(axis_angle: torch.Tensor) -> torch.Tensor:
        angles = torch.norm(axis_angle, p=2, dim=-1, keepdim=True)
        sin_half_angles_over_angles = 0.5 * torch.sinc(angles * 0.5 / torch.pi)
        return torch.cat(
            [torch.cos(angles * 0.5), axis_angle * sin_half_angles_over_angles], dim=-1
        )

    def quaternion_to_axis_angle(quaternions: torch.Tensor) -> torch.Tensor:
        norms = torch.norm(quaternions[..., 1:], p=2, dim=-1, keepdim=True)
        half_angles = torch.atan2(norms, quaternions[..., :1])
        sin_half_angles_over_angles = 0.5 * torch.sinc(half_angles / torch.pi)
        # angles/2 are between [-pi/2, pi/2], thus sin_half_angles_over_angles
        # can't be zero
        return quaternions[..., 1:] / sin_half_angles_over_angles

    def rotation_6d_to_matrix(d6: torch.Tensor) -> torch.Tensor:
        a1, a2 = d6[..., :3], d6[..., 3:]
        b1 = F.normalize(a1, dim=-1)
        b2 = a2 - (b1 * a2).sum(-1, keepdim=True) * b1
        b2 = F.normalize(b2, dim=-1)
        b3 = torch.cross(b1, b2, dim=-1)
        return torch.stack((b1, b2, b3), dim=-2)

    def matrix_to_rotation_6d(matrix: torch.Tensor) -> torch.Tensor:
        batch_dim = matrix.size()[:-2]
        return matrix[..., :2, :].clone().reshape(batch_dim + (6,))

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== transforms/math.py, so3.py, se3.py
def lie_page(torch, rc):
    rotation_conversions = rc
    solve = torch.linalg.solve  # pytorch3d/common/compat.py on PyTorch >= 1.8

    DEFAULT_ACOS_BOUND = 1.0 - 1e-4

    def acos_linear_extrapolation(
        x: torch.Tensor,
        bounds: Tuple[float, float] = (-DEFAULT_ACOS_BOUND, DEFAULT_ACOS_BOUND),
    ) -> torch.Tensor:
        lower_bound, upper_bound = bounds

        if lower_bound > upper_bound:
            raise ValueError("lower bound has to be smaller or equal to upper bound.")

        if lower_bound <= -1.0 or upper_bound >= 1.0:
            raise ValueError("Both lower bound and upper bound have to be within (-1, 1).")

        # init an empty tensor and define the domain sets
        acos_extrap = torch.empty_like(x)
        x_upper = x >= upper_bound
        x_lower = x <= lower_bound
        x_mid = (~x_upper) & (~x_lower)

        # acos calculation for upper_bound < x < lower_bound
        acos_extrap[x_mid] = torch.acos(x[x_mid])
        # the linear extrapolation for x >= upper_bound
        acos_extrap[x_upper] = _acos_linear_approximation(x[x_upper], upper_bound)
        # the linear extrapolation for x <= lower_bound
        acos_extrap[x_lower] = _acos_linear_approximation(x[x_lower], lower_bound)

        return acos_extrap

    def _acos_linear_approximation(x: torch.Tensor, x0: float) -> torch.Tensor:
        return (x - x0) * _dacos_dx(x0) + math.acos(x0)

    def _dacos_dx(x: float) -> float:
        return (-1.0) / math.sqrt(1.0 - x * x)

    def so3_relative_angle(
        R1: torch.Tensor,
        R2: torch.Tensor,
        cos_angle: bool = False,
        cos_bound: float = 1e-4,
        eps: float = 1e-4,
    ) -> torch.Tensor:
        R12 = torch.bmm(R1, R2.permute(0, 2, 1))
        return so3_rotation_angle(R12, cos_angle=cos_angle, cos_bound=cos_bound, eps=eps)

    def so3_rotation_angle(
        R: torch.Tensor,
        eps: float = 1e-4,
        cos_angle: bool = False,
        cos_bound: float = 1e-4,
    ) -> torch.Tensor:
        N, dim1, dim2 = R.shape
        if dim1 != 3 or dim2 != 3:
            raise ValueError("Input has to be a batch of 3x3 Tensors.")

        rot_trace = R[:, 0, 0] + R[:, 1, 1] + R[:, 2, 2]

        if ((rot_trace < -1.0 - eps) + (rot_trace > 3.0 + eps)).any():
            raise ValueError("A matrix has trace outside valid range [-1-eps,3+eps].")

        # phi ... rotation angle
        phi_cos = (rot_trace - 1.0) * 0.5

        if cos_angle:
            return phi_cos
        else:
            if cos_bound > 0.0:
                bound = 1.0 - cos_bound
                return acos_linear_extrapolation(phi_cos, (-bound, bound))
            else:
                return torch.acos(phi_cos)

    def so3_exp_map(log_rot: torch.Tensor, eps: float = 0.0001) -> torch.Tensor:
        return _so3_exp_map(log_rot, eps=eps)[0]

    def _so3_exp_map(
        log_rot: torch.Tensor, eps: float = 0.0001
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        _, dim = log_rot.shape
        if dim != 3:
            raise ValueError("Input tensor shape has to be Nx3.")

        nrms = (log_rot * log_rot).sum(1)
        # phis ... rotation angles
        rot_angles = torch.clamp(nrms, eps).sqrt()
        skews = hat(log_rot)
        skews_square = torch.bmm(skews, skews)

        R = rotation_conversions.axis_angle_to_matrix(log_rot)

        return R, rot_angles, skews, skews_square

    def so3_log_map(
        R: torch.Tensor, eps: float = 0.0001, cos_bound: float = 1e-4
    ) -> torch.Tensor:
        N, dim1, dim2 = R.shape
        if dim1 != 3 or dim2 != 3:
            raise ValueError("Input has to be a batch of 3x3 Tensors.")

        return rotation_conversions.matrix_to_axis_angle(R)

    def hat_inv(h: torch.Tensor) -> torch.Tensor:
        N, dim1, dim2 = h.shape
        if dim1 != 3 or dim2 != 3:
            raise ValueError("Input has to be a batch of 3x3 Tensors.")

        ss_diff = torch.abs(h + h.permute(0, 2, 1)).max()

        HAT_INV_SKEW_SYMMETRIC_TOL = 1e-5
        if float(ss_diff) > HAT_INV_SKEW_SYMMETRIC_TOL:
            raise ValueError("One of input matrices is not skew-symmetric.")

        x = h[:, 2, 1]
        y = h[:, 0, 2]
        z = h[:, 1, 0]

        v = torch.stack((x, y, z), dim=1)

        return v

    def hat(v: torch.Tensor) -> torch.Tensor:
        N, dim = v.shape
        if dim != 3:
            raise ValueError("Input vectors have to be 3-dimensional.")

        h = torch.zeros((N, 3, 3), dtype=v.dtype, device=v.device)

        x, y, z = v.unbind(1)

        h[:, 0, 1] = -z
        h[:, 0, 2] = y
        h[:, 1, 0] = z
        h[:, 1, 2] = -x
        h[:, 2, 0] = -y
        h[:, 2, 1] = x

        return h

    def se3_exp_map(log_transform: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
        if log_transform.ndim != 2 or log_transform.shape[1] != 6:
            raise ValueError("Expected input to be of shape (N, 6).")

        N, _ = log_transform.shape

        log_translation = log_transform[..., :3]
        log_rotation = log_transform[..., 3:]

        # rotation is an exponential map of log_rotation
        (
            R,
            rotation_angles,
            log_rotation_hat,
            log_rotation_hat_square,
        ) = _so3_exp_map(log_rotation, eps=eps)

        # translation is V @ T
        V = _se3_V_matrix(
            log_rotation,
            log_rotation_hat,
            log_rotation_hat_square,
            rotation_angles,
            eps=eps,
        )
        T = torch.bmm(V, log_translation[:, :, None])[:, :, 0]

        transform = torch.zeros(
            N, 4, 4, dtype=log_transform.dtype, device=log_transform.device
        )

        transform[:, :3, :3] = R
        transform[:, :3, 3] = T
        transform[:, 3, 3] = 1.0

        return transform.permute(0, 2, 1)

    def se3_log_map(
        transform: torch.Tensor, eps: float = 1e-4, cos_bound: float = 1e-4
    ) -> torch.Tensor:
        if transform.ndim != 3:
            raise ValueError("Input tensor shape has to be (N, 4, 4).")

        N, dim1, dim2 = transform.shape
        if dim1 != 4 or dim2 != 4:
            raise ValueError("Input tensor shape has to be (N, 4, 4).")

        if not torch.allclose(transform[:, :3, 3], torch.zeros_like(transform[:, :3, 3])):
            raise ValueError("All elements of `transform[:, :3, 3]` should be 0.")

        # log_rot is just so3_log_map of the upper left 3x3 block
        R = transform[:, :3, :3].permute(0, 2, 1)
        log_rotation = so3_log_map(R, eps=eps, cos_bound=cos_bound)

        # log_translation is V^-1 @ T
        T = transform[:, 3, :3]
        V = _se3_V_matrix(*_get_se3_V_input(log_rotation), eps=eps)
        log_translation = solve(V, T[:, :, None])[:, :, 0]

        return torch.cat((log_translation, log_rotation), dim=1)

    def _se3_V_matrix(
        log_rotation: torch.Tensor,
        log_rotation_hat: torch.Tensor,
        log_rotation_hat_square: torch.Tensor,
        rotation_angles: torch.Tensor,
        eps: float = 1e-4,
    ) -> torch.Tensor:
        V = (
            torch.eye(3, dtype=log_rotation.dtype, device=log_rotation.device)[None]
            + log_rotation_hat
            * ((1 - torch.cos(rotation_angles)) / (rotation_angles**2))[:, None, None]
            + (
                log_rotation_hat_square
                * ((rotation_angles - torch.sin(rotation_angles)) / (rotation_angles**3))[
                    :, None, None
                ]
            )
        )

        return V

    def _get_se3_V_input(log_rotation: torch.Tensor, eps: float = 1e-4):
        nrms = (log_rotation**2).sum(-1)
        rotation_angles = torch.clamp(nrms, eps).sqrt()
        log_rotation_hat = hat(log_rotation)
        log_rotation_hat_square = torch.bmm(log_rotation_hat, log_rotation_hat)
        return log_rotation, log_rotation_hat, log_rotation_hat_square, rotation_angles

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v) and k != "solve"})


# ====================================================================== transforms/transform3d.py
def transform_page(torch, rc):
    _axis_angle_rotation = rc._axis_angle_rotation

    class Transform3d:
        def __init__(
            self,
            dtype: torch.dtype = torch.float32,
            device="cpu",
            matrix: Optional[torch.Tensor] = None,
        ):
            if matrix is None:
                self._matrix = torch.eye(4, dtype=dtype, device=device).view(1, 4, 4)
            else:
                if matrix.ndim not in (2, 3):
                    raise ValueError('"matrix" has to be a 2- or a 3-dimensional tensor.')
                if matrix.shape[-2] != 4 or matrix.shape[-1] != 4:
                    raise ValueError(
                        '"matrix" has to be a tensor of shape (minibatch, 4, 4)'
                    )
                # set the device from matrix
                device = matrix.device
                self._matrix = matrix.view(-1, 4, 4)

            self._transforms = []  # store transforms to compose
            self._lu = None
            self.device = device

        def __len__(self):
            return self.get_matrix().shape[0]

        def compose(self, *others):
            out = Transform3d(device=self.device)
            out._matrix = self._matrix.clone()
            for other in others:
                if not isinstance(other, Transform3d):
                    msg = "Only possible to compose Transform3d objects; got %s"
                    raise ValueError(msg % type(other))
            out._transforms = self._transforms + list(others)
            return out

        def get_matrix(self):
            composed_matrix = self._matrix.clone()
            if len(self._transforms) > 0:
                for other in self._transforms:
                    other_matrix = other.get_matrix()
                    composed_matrix = _broadcast_bmm(composed_matrix, other_matrix)
            return composed_matrix

        def _get_matrix_inverse(self):
            return torch.inverse(self._matrix)

        def inverse(self, invert_composed: bool = False):
            tinv = Transform3d(device=self.device)

            if invert_composed:
                # first compose then invert
                tinv._matrix = torch.inverse(self.get_matrix())
            else:
                # self._get_matrix_inverse() implements efficient inverse
                # of self._matrix
                i_matrix = self._get_matrix_inverse()

                # 2 cases:
                if len(self._transforms) > 0:
                    # a) Either we have a non-empty list of transforms:
                    tinv._transforms = [t.inverse() for t in reversed(self._transforms)]
                    last = Transform3d(device=self.device)
                    last._matrix = i_matrix
                    tinv._transforms.append(last)
                else:
                    # b) Or there are no stored transformations
                    # we just set inverted matrix
                    tinv._matrix = i_matrix

            return tinv

        def stack(self, *others):
            transforms = [self] + list(others)
            matrix = torch.cat([t._matrix for t in transforms], dim=0)
            out = Transform3d()
            out._matrix = matrix
            return out

        def transform_points(self, points, eps: Optional[float] = None):
            points_batch = points.clone()
            if points_batch.dim() == 2:
                points_batch = points_batch[None]  # (P, 3) -> (1, P, 3)
            if points_batch.dim() != 3:
                msg = "Expected points to have dim = 2 or dim = 3: got shape %r"
                raise ValueError(msg % repr(points.shape))

            N, P, _3 = points_batch.shape
            ones = torch.ones(N, P, 1, dtype=points.dtype, device=points.device)
            points_batch = torch.cat([points_batch, ones], dim=2)

            composed_matrix = self.get_matrix()
            points_out = _broadcast_bmm(points_batch, composed_matrix)
            denom = points_out[..., 3:]  # denominator
            if eps is not None:
                denom_sign = denom.sign() + (denom == 0.0).type_as(denom)
                denom = denom_sign * torch.clamp(denom.abs(), eps)
            points_out = points_out[..., :3] / denom

            # When transform is (1, 4, 4) and points is (P, 3) return
            # points_out of shape (P, 3)
            if points_out.shape[0] == 1 and points.dim() == 2:
                points_out = points_out.reshape(points.shape)

            return points_out

        def transform_normals(self, normals):
            if normals.dim() not in [2, 3]:
                msg = "Expected normals to have dim = 2 or dim = 3: got shape %r"
                raise ValueError(msg % (normals.shape,))
            composed_matrix = self.get_matrix()

            # TODO: inverse is bad! Solve a linear system instead
            mat = composed_matrix[:, :3, :3]
            normals_out = _broadcast_bmm(normals, mat.transpose(1, 2).inverse())

            # When transform is (1, 4, 4) and normals is (P, 3) return
            # normals_out of shape (P, 3)
            if normals_out.shape[0] == 1 and normals.dim() == 2:
                normals_out = normals_out.reshape(normals.shape)

            return normals_out

        def translate(self, *args, **kwargs):
            return self.compose(Translate(device=self.device, *args, **kwargs))

        def scale(self, *args, **kwargs):
            return self.compose(Scale(device=self.device, *args, **kwargs))

        def rotate_axis_angle(self, *args, **kwargs):
            return self.compose(RotateAxisAngle(device=self.device, *args, **kwargs))

        def clone(self):
            other = Transform3d(device=self.device)
            if self._lu is not None:
                other._lu = [l.clone() for l in self._lu]  # noqa: E741
            other._matrix = self._matrix.clone()
            other._transforms = [t.clone() for t in self._transforms]
            return other

    class Translate(Transform3d):
        def __init__(self, x, y=None, z=None, dtype=torch.float32, device: str = "cpu"):
            super().__init__(device=device)
            xyz = _handle_input(x, y, z, dtype, device, "Translate")
            N = xyz.shape[0]

            mat = torch.eye(4, dtype=dtype, device=device)
            mat = mat.view(1, 4, 4).repeat(N, 1, 1)
            mat[:, 3, :3] = xyz
            self._matrix = mat

        def _get_matrix_inverse(self):
            inv_mask = self._matrix.new_ones([1, 4, 4])
            inv_mask[0, 3, :3] = -1.0
            i_matrix = self._matrix * inv_mask
            return i_matrix

    class Scale(Transform3d):
        def __init__(self, x, y=None, z=None, dtype=torch.float32, device: str = "cpu"):
            super().__init__(device=device)
            xyz = _handle_input(x, y, z, dtype, device, "scale", allow_singleton=True)
            N = xyz.shape[0]

            # TODO: Can we do this all in one go somehow?
            mat = torch.eye(4, dtype=dtype, device=device)
            mat = mat.view(1, 4, 4).repeat(N, 1, 1)
            mat[:, 0, 0] = xyz[:, 0]
            mat[:, 1, 1] = xyz[:, 1]
            mat[:, 2, 2] = xyz[:, 2]
            self._matrix = mat

        def _get_matrix_inverse(self):
            xyz = torch.stack([self._matrix[:, i, i] for i in range(4)], dim=1)
            ixyz = 1.0 / xyz
            imat = torch.diag_embed(ixyz, dim1=1, dim2=2)
            return imat

    class Rotate(Transform3d):
        def __init__(
            self, R, dtype=torch.float32, device: str = "cpu", orthogonal_tol: float = 1e-5
        ):
            super().__init__(device=device)
            if R.dim() == 2:
                R = R[None]
            if R.shape[-2:] != (3, 3):
                msg = "R must have shape (3, 3) or (N, 3, 3); got %s"
                raise ValueError(msg % repr(R.shape))
            R = R.to(dtype=dtype).to(device=device)
            _check_valid_rotation_matrix(R, tol=orthogonal_tol)
            N = R.shape[0]
            mat = torch.eye(4, dtype=dtype, device=device)
            mat = mat.view(1, 4, 4).repeat(N, 1, 1)
            mat[:, :3, :3] = R
            self._matrix = mat

        def _get_matrix_inverse(self):
            return self._matrix.permute(0, 2, 1).contiguous()

    class RotateAxisAngle(Rotate):
        def __init__(
            self,
            angle,
            axis: str = "X",
            degrees: bool = True,
            dtype=torch.float64,
            device: str = "cpu",
        ):
            axis = axis.upper()
            if axis not in ["X", "Y", "Z"]:
                msg = "Expected axis to be one of ['X', 'Y', 'Z']; got %s"
                raise ValueError(msg % axis)
            angle = _handle_angle_input(angle, dtype, device, "RotateAxisAngle")
            angle = (angle / 180.0 * math.pi) if degrees else angle
            # R will always be of shape (N, 3, 3)
            R = _axis_angle_rotation(axis, angle).transpose(1, 2)
            super().__init__(device=device, R=R)

    def _handle_coord(c, dtype, device):
        if not torch.is_tensor(c):
            c = torch.tensor(c, dtype=dtype, device=device)
        if c.dim() == 0:
            c = c.view(1)
        return c

    def _handle_input(x, y, z, dtype, device, name: str, allow_singleton: bool = False):
        # If x is actually a tensor of shape (N, 3) then just return it
        if torch.is_tensor(x) and x.dim() == 2:
            if x.shape[1] != 3:
                msg = "Expected tensor of shape (N, 3); got %r (in %s)"
                raise ValueError(msg % (x.shape, name))
            if y is not None or z is not None:
                msg = "Expected y and z to be None (in %s)" % name
                raise ValueError(msg)
            return x

        if allow_singleton and y is None and z is None:
            y = x
            z = x

        # Convert all to 1D tensors
        xyz = [_handle_coord(c, dtype, device) for c in [x, y, z]]

        # Broadcast and concatenate
        sizes = [c.shape[0] for c in xyz]
        N = max(sizes)
        for c in xyz:
            if c.shape[0] != 1 and c.shape[0] != N:
                msg = "Got non-broadcastable sizes %r (in %s)" % (sizes, name)
                raise ValueError(msg)
        xyz = [c.expand(N) for c in xyz]
        xyz = torch.stack(xyz, dim=1)
        return xyz

    def _handle_angle_input(x, dtype, device: str, name: str):
        if torch.is_tensor(x) and x.dim() > 1:
            msg = "Expected tensor of shape (N,); got %r (in %s)"
            raise ValueError(msg % (x.shape, name))
        else:
            return _handle_coord(x, dtype, device)

    def _broadcast_bmm(a, b):
        if a.dim() == 2:
            a = a[None]
        if len(a) != len(b):
            if not ((len(a) == 1) or (len(b) == 1)):
                msg = "Expected batch dim for bmm to be equal or 1; got %r, %r"
                raise ValueError(msg % (a.shape, b.shape))
            if len(a) == 1:
                a = a.expand(len(b), -1, -1)
            if len(b) == 1:
                b = b.expand(len(a), -1, -1)
        return a.bmm(b)

    def _check_valid_rotation_matrix(R, tol: float = 1e-7):
        N = R.shape[0]
        eye = torch.eye(3, dtype=R.dtype, device=R.device)
        eye = eye.view(1, 3, 3).expand(N, -1, -1)
        orthogonal = torch.allclose(R.bmm(R.transpose(1, 2)), eye, atol=tol)
        det_R = torch.det(R)
        no_distortion = torch.allclose(det_R, torch.ones_like(det_R))
        if not (orthogonal and no_distortion):
            msg = "R is not a valid rotation matrix"
            warnings.warn(msg)
        return

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ======================================================== ops/utils.py, ops/points_alignment.py, structures/utils.py
def alignment_page(torch):
    class _KNN(NamedTuple):
        dists: torch.Tensor
        idx: torch.Tensor
        knn: Optional[torch.Tensor]

    def knn_gather(x, idx, lengths=None):
        # ops/knn.py's knn_gather for homogeneous clouds
        N, M, U = x.shape
        _N, L, K = idx.shape
        idx_expanded = idx[:, :, :, None].expand(-1, -1, -1, U)
        x_out = x[:, :, None].expand(-1, -1, K, -1).gather(1, idx_expanded)
        return x_out

    def knn_points(p1, p2, lengths1=None, lengths2=None, K=1, return_nn=False):
        # plain-PyTorch stand-in for the compiled kernel: squared distances, K smallest
        dists, idx = (torch.cdist(p1, p2) ** 2).topk(K, dim=2, largest=False)
        return _KNN(dists, idx, knn_gather(p2, idx) if return_nn else None)

    def wmean(
        x: torch.Tensor,
        weight: Optional[torch.Tensor] = None,
        dim: Union[int, Tuple[int]] = -2,
        keepdim: bool = True,
        eps: float = 1e-9,
    ) -> torch.Tensor:
        args = {"dim": dim, "keepdim": keepdim}

        if weight is None:
            return x.mean(**args)

        if any(
            xd != wd and xd != 1 and wd != 1
            for xd, wd in zip(x.shape[-2::-1], weight.shape[::-1])
        ):
            raise ValueError("wmean: weights are not compatible with the tensor")

        return (x * weight[..., None]).sum(**args) / weight[..., None].sum(**args).clamp(
            eps
        )

    def eyes(
        dim: int,
        N: int,
        device: Optional[torch.device] = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        identities = torch.eye(dim, device=device, dtype=dtype)
        return identities[None].repeat(N, 1, 1)

    def convert_pointclouds_to_tensor(pcl):
        if is_pointclouds(pcl):
            X = pcl.points_padded()  # type: ignore
            num_points = pcl.num_points_per_cloud()  # type: ignore
        elif torch.is_tensor(pcl):
            X = pcl
            num_points = X.shape[1] * torch.ones(  # type: ignore
                X.shape[0], device=X.device, dtype=torch.int64
            )
        else:
            raise ValueError(
                "The inputs X, Y should be either Pointclouds objects or tensors."
            )
        return X, num_points

    def is_pointclouds(pcl):
        return hasattr(pcl, "points_padded") and hasattr(pcl, "num_points_per_cloud")

    def list_to_padded(
        x: Union[List[torch.Tensor], Tuple[torch.Tensor]],
        pad_size: Union[Sequence[int], None] = None,
        pad_value: float = 0.0,
        equisized: bool = False,
    ) -> torch.Tensor:
        if equisized:
            return torch.stack(x, 0)

        if not all(torch.is_tensor(y) for y in x):
            raise ValueError("All items have to be instances of a torch.Tensor.")

        # we set the common number of dimensions to the maximum
        # of the dimensionalities of the tensors in the list
        element_ndim = max(y.ndim for y in x)

        # replace empty 1D tensors with empty tensors with a correct number of dimensions
        x = [
            (y.new_zeros([0] * element_ndim) if (y.ndim == 1 and y.nelement() == 0) else y)
            for y in x
        ]

        if any(y.ndim != x[0].ndim for y in x):
            raise ValueError("All items have to have the same number of dimensions!")

        if pad_size is None:
            pad_dims = [
                max(y.shape[dim] for y in x if len(y) > 0) for dim in range(x[0].ndim)
            ]
        else:
            if any(len(pad_size) != y.ndim for y in x):
                raise ValueError("Pad size must contain target size for all dimensions.")
            pad_dims = pad_size

        N = len(x)
        x_padded = x[0].new_full((N, *pad_dims), pad_value)
        for i, y in enumerate(x):
            if len(y) > 0:
                slices = (i, *(slice(0, y.shape[dim]) for dim in range(y.ndim)))
                x_padded[slices] = y
        return x_padded

    def padded_to_list(
        x: torch.Tensor,
        split_size: Union[Sequence[int], Sequence[Sequence[int]], None] = None,
    ):
        x_list = list(x.unbind(0))

        if split_size is None:
            return x_list

        N = len(split_size)
        if x.shape[0] != N:
            raise ValueError("Split size must be of same length as inputs first dimension")

        for i in range(N):
            if isinstance(split_size[i], int):
                x_list[i] = x_list[i][: split_size[i]]
            else:
                slices = tuple(slice(0, s) for s in split_size[i])  # pyre-ignore
                x_list[i] = x_list[i][slices]
        return x_list

    def list_to_packed(x: List[torch.Tensor]):
        N = len(x)
        num_items = torch.zeros(N, dtype=torch.int64, device=x[0].device)
        item_packed_first_idx = torch.zeros(N, dtype=torch.int64, device=x[0].device)
        item_packed_to_list_idx = []
        cur = 0
        for i, y in enumerate(x):
            num = len(y)
            num_items[i] = num
            item_packed_first_idx[i] = cur
            item_packed_to_list_idx.append(
                torch.full((num,), i, dtype=torch.int64, device=y.device)
            )
            cur += num

        x_packed = torch.cat(x, dim=0)
        item_packed_to_list_idx = torch.cat(item_packed_to_list_idx, dim=0)

        return x_packed, num_items, item_packed_first_idx, item_packed_to_list_idx

    def packed_to_list(x: torch.Tensor, split_size: Union[list, int]):
        return x.split(split_size, dim=0)

    def padded_to_packed(
        x: torch.Tensor,
        split_size: Union[list, tuple, None] = None,
        pad_value: Union[float, int, None] = None,
    ):
        if x.ndim != 3:
            raise ValueError("Supports only 3-dimensional input tensors")

        N, M, D = x.shape

        if split_size is not None and pad_value is not None:
            raise ValueError("Only one of split_size or pad_value should be provided.")

        x_packed = x.reshape(-1, D)  # flatten padded

        if pad_value is None and split_size is None:
            return x_packed

        # Convert to packed using pad value
        if pad_value is not None:
            mask = x_packed.ne(pad_value).any(-1)
            x_packed = x_packed[mask]
            return x_packed

        # Convert to packed using split sizes
        N = len(split_size)
        if x.shape[0] != N:
            raise ValueError("Split size must be of same length as inputs first dimension")

        if not all(isinstance(i, int) for i in split_size):
            raise ValueError(
                "Support only 1-dimensional unbinded tensor. \
                    Split size for more dimensions provided"
            )

        padded_to_packed_idx = torch.cat(
            [
                torch.arange(v, dtype=torch.int64, device=x.device) + i * M
                for (i, v) in enumerate(split_size)
            ],
            dim=0,
        )

        return x_packed[padded_to_packed_idx]

    strutil = SimpleNamespace(list_to_padded=list_to_padded)
    oputil = SimpleNamespace(
        wmean=wmean, eyes=eyes, convert_pointclouds_to_tensor=convert_pointclouds_to_tensor,
        is_pointclouds=is_pointclouds,
    )

    class SimilarityTransform(NamedTuple):
        R: torch.Tensor
        T: torch.Tensor
        s: torch.Tensor

    class ICPSolution(NamedTuple):
        converged: bool
        rmse: Union[torch.Tensor, None]
        Xt: torch.Tensor
        RTs: SimilarityTransform
        t_history: List[SimilarityTransform]

    def iterative_closest_point(
        X,
        Y,
        init_transform: Optional[SimilarityTransform] = None,
        max_iterations: int = 100,
        relative_rmse_thr: float = 1e-6,
        estimate_scale: bool = False,
        allow_reflection: bool = False,
        verbose: bool = False,
    ) -> ICPSolution:
        # make sure we convert input Pointclouds structures to
        # padded tensors of shape (N, P, 3)
        Xt, num_points_X = oputil.convert_pointclouds_to_tensor(X)
        Yt, num_points_Y = oputil.convert_pointclouds_to_tensor(Y)

        b, size_X, dim = Xt.shape

        if (Xt.shape[2] != Yt.shape[2]) or (Xt.shape[0] != Yt.shape[0]):
            raise ValueError(
                "Point sets X and Y have to have the same "
                + "number of batches and data dimensions."
            )

        if ((num_points_Y < Yt.shape[1]).any() or (num_points_X < Xt.shape[1]).any()) and (
            num_points_Y != num_points_X
        ).any():
            # we have a heterogeneous input (e.g. because X/Y is
            # an instance of Pointclouds)
            mask_X = (
                torch.arange(size_X, dtype=torch.int64, device=Xt.device)[None]
                < num_points_X[:, None]
            ).type_as(Xt)
        else:
            mask_X = Xt.new_ones(b, size_X)

        # clone the initial point cloud
        Xt_init = Xt.clone()

        if init_transform is not None:
            # parse the initial transform from the input and apply to Xt
            try:
                R, T, s = init_transform
                assert (
                    R.shape == torch.Size((b, dim, dim))
                    and T.shape == torch.Size((b, dim))
                    and s.shape == torch.Size((b,))
                )
            except Exception:
                raise ValueError(
                    "The initial transformation init_transform has to be "
                    "a named tuple SimilarityTransform with elements (R, T, s). "
                    "R are dim x dim orthonormal matrices of shape "
                    "(minibatch, dim, dim), T is a batch of dim-dimensional "
                    "translations of shape (minibatch, dim) and s is a batch "
                    "of scalars of shape (minibatch,)."
                )
            # apply the init transform to the input point cloud
            Xt = _apply_similarity_transform(Xt, R, T, s)
        else:
            # initialize the transformation with identity
            R = oputil.eyes(dim, b, device=Xt.device, dtype=Xt.dtype)
            T = Xt.new_zeros((b, dim))
            s = Xt.new_ones(b)

        prev_rmse = None
        rmse = None
        iteration = -1
        converged = False

        # initialize the transformation history
        t_history = []

        # the main loop over ICP iterations
        for iteration in range(max_iterations):
            Xt_nn_points = knn_points(
                Xt, Yt, lengths1=num_points_X, lengths2=num_points_Y, K=1, return_nn=True
            ).knn[:, :, 0, :]

            # get the alignment of the nearest neighbors from Yt with Xt_init
            R, T, s = corresponding_points_alignment(
                Xt_init,
                Xt_nn_points,
                weights=mask_X,
                estimate_scale=estimate_scale,
                allow_reflection=allow_reflection,
            )

            # apply the estimated similarity transform to Xt_init
            Xt = _apply_similarity_transform(Xt_init, R, T, s)

            # add the current transformation to the history
            t_history.append(SimilarityTransform(R, T, s))

            # compute the root mean squared error
            Xt_sq_diff = ((Xt - Xt_nn_points) ** 2).sum(2)
            rmse = oputil.wmean(Xt_sq_diff[:, :, None], mask_X).sqrt()[:, 0, 0]

            # compute the relative rmse
            if prev_rmse is None:
                relative_rmse = rmse.new_ones(b)
            else:
                relative_rmse = (prev_rmse - rmse) / prev_rmse

            if verbose:
                rmse_msg = (
                    f"ICP iteration {iteration}: mean/max rmse = "
                    + f"{rmse.mean():1.2e}/{rmse.max():1.2e} "
                    + f"; mean relative rmse = {relative_rmse.mean():1.2e}"
                )
                print(rmse_msg)

            # check for convergence
            if (relative_rmse <= relative_rmse_thr).all():
                converged = True
                break

            # update the previous rmse
            prev_rmse = rmse

        if verbose:
            if converged:
                print(f"ICP has converged in {iteration + 1} iterations.")
            else:
                print(f"ICP has not converged in {max_iterations} iterations.")

        if oputil.is_pointclouds(X):
            Xt = X.update_padded(Xt)  # type: ignore

        return ICPSolution(converged, rmse, Xt, SimilarityTransform(R, T, s), t_history)

    # threshold for checking that point crosscorelation
    # is full rank in corresponding_points_alignment
    AMBIGUOUS_ROT_SINGULAR_THR = 1e-15

    def corresponding_points_alignment(
        X,
        Y,
        weights: Union[torch.Tensor, List[torch.Tensor], None] = None,
        estimate_scale: bool = False,
        allow_reflection: bool = False,
        eps: float = 1e-9,
    ) -> SimilarityTransform:
        # make sure we convert input Pointclouds structures to tensors
        Xt, num_points = oputil.convert_pointclouds_to_tensor(X)
        Yt, num_points_Y = oputil.convert_pointclouds_to_tensor(Y)

        if (Xt.shape != Yt.shape) or (num_points != num_points_Y).any():
            raise ValueError(
                "Point sets X and Y have to have the same \
                number of batches, points and dimensions."
            )
        if weights is not None:
            if isinstance(weights, list):
                if any(np != w.shape[0] for np, w in zip(num_points, weights)):
                    raise ValueError(
                        "number of weights should equal to the "
                        + "number of points in the point cloud."
                    )
                weights = [w[..., None] for w in weights]
                weights = strutil.list_to_padded(weights)[..., 0]

            if Xt.shape[:2] != weights.shape:
                raise ValueError("weights should have the same first two dimensions as X.")

        b, n, dim = Xt.shape

        if (num_points < Xt.shape[1]).any() or (num_points < Yt.shape[1]).any():
            # in case we got Pointclouds as input, mask the unused entries in Xc, Yc
            mask = (
                torch.arange(n, dtype=torch.int64, device=Xt.device)[None]
                < num_points[:, None]
            ).type_as(Xt)
            weights = mask if weights is None else mask * weights.type_as(Xt)

        # compute the centroids of the point sets
        Xmu = oputil.wmean(Xt, weight=weights, eps=eps)
        Ymu = oputil.wmean(Yt, weight=weights, eps=eps)

        # mean-center the point sets
        Xc = Xt - Xmu
        Yc = Yt - Ymu

        total_weight = torch.clamp(num_points, 1)
        # special handling for heterogeneous point clouds and/or input weights
        if weights is not None:
            Xc *= weights[:, :, None]
            Yc *= weights[:, :, None]
            total_weight = torch.clamp(weights.sum(1), eps)

        if (num_points < (dim + 1)).any():
            warnings.warn(
                "The size of one of the point clouds is <= dim+1. "
                + "corresponding_points_alignment cannot return a unique rotation."
            )

        # compute the covariance XYcov between the point sets Xc, Yc
        XYcov = torch.bmm(Xc.transpose(2, 1), Yc)
        XYcov = XYcov / total_weight[:, None, None]

        # decompose the covariance matrix XYcov
        U, S, V = torch.svd(XYcov)

        # catch ambiguous rotation by checking the magnitude of singular values
        if (S.abs() <= AMBIGUOUS_ROT_SINGULAR_THR).any() and not (
            num_points < (dim + 1)
        ).any():
            warnings.warn(
                "Excessively low rank of "
                + "cross-correlation between aligned point clouds. "
                + "corresponding_points_alignment cannot return a unique rotation."
            )

        # identity matrix used for fixing reflections
        E = torch.eye(dim, dtype=XYcov.dtype, device=XYcov.device)[None].repeat(b, 1, 1)

        if not allow_reflection:
            # reflection test:
            #   checks whether the estimated rotation has det==1,
            #   if not, finds the nearest rotation s.t. det==1 by
            #   flipping the sign of the last singular vector U
            R_test = torch.bmm(U, V.transpose(2, 1))
            E[:, -1, -1] = torch.det(R_test)

        # find the rotation matrix by composing U and V again
        R = torch.bmm(torch.bmm(U, E), V.transpose(2, 1))

        if estimate_scale:
            # estimate the scaling component of the transformation
            trace_ES = (torch.diagonal(E, dim1=1, dim2=2) * S).sum(1)
            Xcov = (Xc * Xc).sum((1, 2)) / total_weight

            # the scaling component
            s = trace_ES / torch.clamp(Xcov, eps)

            # translation component
            T = Ymu[:, 0, :] - s[:, None] * torch.bmm(Xmu, R)[:, 0, :]
        else:
            # translation component
            T = Ymu[:, 0, :] - torch.bmm(Xmu, R)[:, 0, :]

            # unit scaling since we do not estimate scale
            s = T.new_ones(b)

        return SimilarityTransform(R, T, s)

    def _apply_similarity_transform(
        X: torch.Tensor, R: torch.Tensor, T: torch.Tensor, s: torch.Tensor
    ) -> torch.Tensor:
        X = s[:, None, None] * torch.bmm(X, R) + T[:, None, :]
        return X

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== renderer/cameras.py (+ renderer/utils.py)
def cameras_page(torch, tp):
    F = torch.nn.functional
    Translate, Rotate = tp.Translate, tp.Rotate

    def format_tensor(input, dtype=torch.float32, device: str = "cpu") -> torch.Tensor:
        if not torch.is_tensor(input):
            input = torch.tensor(input, dtype=dtype, device=device)
        if input.dim() == 0:
            input = input.view(1)
        if input.device != device:
            input = input.to(device=device)
        return input

    def convert_to_tensors_and_broadcast(*args, dtype=torch.float32, device: str = "cpu"):
        # Convert all inputs to tensors with a batch dimension
        args_1d = [format_tensor(c, dtype, device) for c in args]

        # Find broadcast size
        sizes = [c.shape[0] for c in args_1d]
        N = max(sizes)

        args_Nd = []
        for c in args_1d:
            if c.shape[0] != 1 and c.shape[0] != N:
                msg = "Got non-broadcastable sizes %r" % sizes
                raise ValueError(msg)

            # Expand broadcast dim and keep non broadcast dims the same size
            expand_sizes = (N,) + (-1,) * len(c.shape[1:])
            args_Nd.append(c.expand(*expand_sizes))

        if len(args) == 1:
            args_Nd = args_Nd[0]  # Return the first element

        return args_Nd

    def get_world_to_view_transform(R, T):
        if T.shape[0] != R.shape[0]:
            msg = "Expected R, T to have the same batch dimension; got %r, %r"
            raise ValueError(msg % (R.shape[0], T.shape[0]))
        if T.dim() != 2 or T.shape[1:] != (3,):
            msg = "Expected T to have shape (N, 3); got %r"
            raise ValueError(msg % repr(T.shape))
        if R.dim() != 3 or R.shape[1:] != (3, 3):
            msg = "Expected R to have shape (N, 3, 3); got %r"
            raise ValueError(msg % repr(R.shape))

        # Create a Transform3d object
        T = Translate(T, device=T.device)
        R = Rotate(R, device=R.device)
        return R.compose(T)

    def camera_position_from_spherical_angles(
        distance, elevation, azimuth, degrees: bool = True, device: str = "cpu"
    ) -> torch.Tensor:
        broadcasted_args = convert_to_tensors_and_broadcast(
            distance, elevation, azimuth, device=device
        )
        dist, elev, azim = broadcasted_args
        if degrees:
            elev = math.pi / 180.0 * elev
            azim = math.pi / 180.0 * azim
        x = dist * torch.cos(elev) * torch.sin(azim)
        y = dist * torch.sin(elev)
        z = dist * torch.cos(elev) * torch.cos(azim)
        camera_position = torch.stack([x, y, z], dim=1)
        if camera_position.dim() == 0:
            camera_position = camera_position.view(1, -1)  # add batch dim.
        return camera_position.view(-1, 3)

    def look_at_rotation(
        camera_position, at=((0, 0, 0),), up=((0, 1, 0),), device: str = "cpu"
    ) -> torch.Tensor:
        # Format input and broadcast
        broadcasted_args = convert_to_tensors_and_broadcast(
            camera_position, at, up, device=device
        )
        camera_position, at, up = broadcasted_args
        for t, n in zip([camera_position, at, up], ["camera_position", "at", "up"]):
            if t.shape[-1] != 3:
                msg = "Expected arg %s to have shape (N, 3); got %r"
                raise ValueError(msg % (n, t.shape))
        z_axis = F.normalize(at - camera_position, eps=1e-5)
        x_axis = F.normalize(torch.cross(up, z_axis, dim=1), eps=1e-5)
        y_axis = F.normalize(torch.cross(z_axis, x_axis, dim=1), eps=1e-5)
        R = torch.cat(
            (x_axis[:, None, :], y_axis[:, None, :], z_axis[:, None, :]), dim=1
        )
        return R.transpose(1, 2)

    def look_at_view_transform(
        dist=1.0,
        elev=0.0,
        azim=0.0,
        degrees: bool = True,
        eye: Optional[Sequence] = None,
        at=((0, 0, 0),),  # (1, 3)
        up=((0, 1, 0),),  # (1, 3)
        device="cpu",
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if eye is not None:
            broadcasted_args = convert_to_tensors_and_broadcast(
                eye, at, up, device=device
            )
            eye, at, up = broadcasted_args
            C = eye
        else:
            broadcasted_args = convert_to_tensors_and_broadcast(
                dist, elev, azim, at, up, device=device
            )
            dist, elev, azim, at, up = broadcasted_args
            C = camera_position_from_spherical_angles(
                dist, elev, azim, degrees=degrees, device=device
            )

        R = look_at_rotation(C, at, up, device=device)
        T = -torch.bmm(R.transpose(1, 2), C[:, :, None])[:, :, 0]
        return R, T

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


# ====================================================================== NumPy references
def _np_quat_to_mat(q):
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def _np_hamilton(a, b):
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - (av * bv).sum(-1, keepdims=True)
    v = aw * bv + bw * av + np.cross(av, bv)
    return np.concatenate([w, v], -1)


def _np_hat(v):
    x, y, z = np.moveaxis(v, -1, 0)
    o = np.zeros_like(x)
    return np.stack([np.stack([o, -z, y], -1), np.stack([z, o, -x], -1), np.stack([-y, x, o], -1)], -2)


def _np_rodrigues(w):
    out = []
    for v in w.reshape(-1, 3):
        t = np.linalg.norm(v)
        K = _np_hat(v)
        if t == 0:
            out.append(np.eye(3))
            continue
        out.append(np.eye(3) + np.sin(t) / t * K + (1 - np.cos(t)) / t**2 * K @ K)
    return np.array(out).reshape(w.shape[:-1] + (3, 3))


def _np_axis(axis, t):
    c, s = np.cos(t), np.sin(t)
    return {"X": np.array([[1, 0, 0], [0, c, -s], [0, s, c]]),
            "Y": np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]),
            "Z": np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])}[axis]


def _np_expm(A, squarings=8, terms=20):
    A = A / 2.0**squarings
    out, term = np.eye(A.shape[0]), np.eye(A.shape[0])
    for k in range(1, terms):
        term = term @ A / k
        out = out + term
    for _ in range(squarings):
        out = out @ out
    return out


def _np_umeyama(X, Y, w, estimate_scale):
    """Weighted Umeyama for one cloud: s X R + T = Y (row vectors). As in points_alignment.py, the centred
    points are multiplied by the weights, so the weights enter the covariances squared."""
    xm, ym = (w @ X) / w.sum(), (w @ Y) / w.sum()
    Xc, Yc = (X - xm) * w[:, None], (Y - ym) * w[:, None]
    cov = Xc.T @ Yc / w.sum()
    U, S, Vt = np.linalg.svd(cov)
    E = np.diag([1.0, 1.0, np.sign(np.linalg.det(U @ Vt))])
    R = U @ E @ Vt
    s = (np.diag(E) * S).sum() / ((Xc**2).sum() / w.sum()) if estimate_scale else 1.0
    return R, ym - s * xm @ R, s


def _fd(f, x, eps=1e-6):
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def _t(a, dtype=None, **kw):
    return lucid.tensor(np.asarray(a), dtype=dtype or lucid.float64, **kw)


def _rand_axis_angles(rng, n, lo=0.2, hi=2.8):
    axis = rng.normal(size=(n, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    return axis * rng.uniform(lo, hi, size=(n, 1))


# ====================================================================== checks without PyTorch
def test_quaternion_matrix_round_trip_and_candidate_selection():
    rc = rotations_page(lucid)
    lucid.manual_seed(0)
    q = rc.random_quaternions(48, dtype=lucid.float64)
    qn = _np(q)
    np.testing.assert_allclose(np.linalg.norm(qn, axis=1), 1.0, atol=1e-12)
    assert (qn[:, 0] >= 0).all()
    R = rc.quaternion_to_matrix(q)
    Rn = _np(R)
    np.testing.assert_allclose(Rn, _np_quat_to_mat(qn), atol=1e-12)
    np.testing.assert_allclose(Rn @ Rn.transpose(0, 2, 1), np.broadcast_to(np.eye(3), Rn.shape), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(Rn), 1.0, atol=1e-12)
    # a non-unit quaternion gives the same rotation (two_s = 2 / |q|^2)
    np.testing.assert_allclose(_np(rc.quaternion_to_matrix(q * 3.0)), Rn, atol=1e-12)
    np.testing.assert_allclose(_np(rc.matrix_to_quaternion(R)), qn, atol=1e-10)
    Rr = _np(rc.random_rotations(5, dtype=lucid.float64))
    np.testing.assert_allclose(np.linalg.det(Rr), 1.0, atol=1e-12)
    assert tuple(rc.random_rotation(dtype=lucid.float64).shape) == (3, 3)

    # each of the four candidates is the best-conditioned one for some matrix: the identity (r),
    # and half turns about x, y, z tilted a little (i, j, k largest)
    qs = np.array([[1.0, 0.1, -0.2, 0.05], [0.05, 1.0, 0.2, -0.1], [0.1, -0.2, 1.0, 0.3], [-0.02, 0.1, 0.3, 1.0]])
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    Rs = _np_quat_to_mat(qs)
    q_abs = np.sqrt(np.maximum(0, np.stack([1 + Rs[:, 0, 0] + Rs[:, 1, 1] + Rs[:, 2, 2],
                                             1 + Rs[:, 0, 0] - Rs[:, 1, 1] - Rs[:, 2, 2],
                                             1 - Rs[:, 0, 0] + Rs[:, 1, 1] - Rs[:, 2, 2],
                                             1 - Rs[:, 0, 0] - Rs[:, 1, 1] + Rs[:, 2, 2]], -1)))
    assert list(q_abs.argmax(-1)) == [0, 1, 2, 3]
    expect = np.where(qs[:, :1] < 0, -qs, qs)  # standardized
    np.testing.assert_allclose(_np(rc.matrix_to_quaternion(_t(Rs))), expect, atol=1e-12)
    with lucid.no_grad():  # the torch.where branch of _sqrt_positive_part
        np.testing.assert_allclose(_np(rc.matrix_to_quaternion(_t(Rs))), expect, atol=1e-12)
    # batched (2, 2, 3, 3) input keeps its batch shape
    out = rc.matrix_to_quaternion(_t(Rs.reshape(2, 2, 3, 3)))
    assert tuple(out.shape) == (2, 2, 4)
    np.testing.assert_allclose(_np(out).reshape(4, 4), expect, atol=1e-12)
    with pytest.raises(ValueError, match="Invalid rotation matrix shape"):
        rc.matrix_to_quaternion(lucid.zeros(2, 3, 4))


def test_quaternion_algebra_against_numpy():
    rc = rotations_page(lucid)
    rng = np.random.default_rng(1)
    a = rng.normal(size=(5, 1, 4))
    b = rng.normal(size=(1, 7, 4))
    a /= np.linalg.norm(a, axis=-1, keepdims=True)
    b /= np.linalg.norm(b, axis=-1, keepdims=True)
    ab = _np_hamilton(a, b)
    np.testing.assert_allclose(_np(rc.quaternion_raw_multiply(_t(a), _t(b))), ab, atol=1e-12)
    np.testing.assert_allclose(_np(rc.quaternion_multiply(_t(a), _t(b))), np.where(ab[..., :1] < 0, -ab, ab),
                               atol=1e-12)
    # the product composes the rotations
    np.testing.assert_allclose(_np_quat_to_mat(ab), _np_quat_to_mat(a) @ _np_quat_to_mat(b), atol=1e-12)
    inv = _np(rc.quaternion_invert(_t(a)))
    np.testing.assert_allclose(inv, a * np.array([1, -1, -1, -1]), atol=0)
    np.testing.assert_allclose(_np(rc.quaternion_raw_multiply(_t(a), _t(inv))),
                               np.broadcast_to([1.0, 0, 0, 0], a.shape), atol=1e-12)
    p = rng.normal(size=(1, 7, 3))
    got = _np(rc.quaternion_apply(_t(a), _t(p)))
    assert got.shape == (5, 7, 3)
    np.testing.assert_allclose(got, np.einsum("aij,bpj->api", _np_quat_to_mat(a[:, 0]), p), atol=1e-12)
    with pytest.raises(ValueError, match="Points are not in 3D"):
        rc.quaternion_apply(_t(a), _t(p[..., :2]))
    np.testing.assert_allclose(_np(rc.standardize_quaternion(_t(-a))), np.where(a[..., :1] > 0, a, -a), atol=0)


def test_euler_angles_every_convention_against_numpy():
    rc = rotations_page(lucid)
    rng = np.random.default_rng(2)
    convs = ["".join(c) for c in itertools.product("XYZ", repeat=3) if c[1] not in (c[0], c[2])]
    assert len(convs) == 12
    for conv in convs:
        tait_bryan = conv[0] != conv[2]
        ang = np.stack([rng.uniform(-3.0, 3.0, 6),
                        rng.uniform(-1.4, 1.4, 6) if tait_bryan else rng.uniform(0.1, 3.0, 6),
                        rng.uniform(-3.0, 3.0, 6)], -1)
        want = np.array([_np_axis(conv[0], a0) @ _np_axis(conv[1], a1) @ _np_axis(conv[2], a2) for a0, a1, a2 in ang])
        M = rc.euler_angles_to_matrix(_t(ang), conv)
        np.testing.assert_allclose(_np(M), want, atol=1e-12, err_msg=conv)
        np.testing.assert_allclose(_np(rc.matrix_to_euler_angles(M, conv)), ang, atol=1e-9, err_msg=conv)
    with pytest.raises(ValueError, match="Invalid convention XXY"):
        rc.euler_angles_to_matrix(_t(ang), "XXY")
    with pytest.raises(ValueError, match="Invalid letter W"):
        rc.matrix_to_euler_angles(M, "WXY")


def test_axis_angle_and_6d_conversions():
    rc = rotations_page(lucid)
    rng = np.random.default_rng(3)
    w = np.concatenate([_rand_axis_angles(rng, 10), np.zeros((1, 3))])
    want = _np_rodrigues(w)
    for fast in (False, True):
        R = rc.axis_angle_to_matrix(_t(w), fast=fast)
        np.testing.assert_allclose(_np(R), want, atol=1e-12, err_msg=str(fast))
        np.testing.assert_allclose(_np(rc.matrix_to_axis_angle(R, fast=fast)), w, atol=1e-9, err_msg=str(fast))
    q = _np(rc.axis_angle_to_quaternion(_t(w)))
    th = np.linalg.norm(w, axis=1, keepdims=True)
    np.testing.assert_allclose(q[:, :1], np.cos(th / 2), atol=1e-12)
    np.testing.assert_allclose(_np(rc.quaternion_to_axis_angle(_t(q))), w, atol=1e-10)
    # the fast route's near-pi branch: axis from (R + I) / 2's first row
    w_pi = np.array([[0.6, -0.48, 0.64]]) * math.pi
    R_pi = _np_rodrigues(w_pi)
    batch = np.concatenate([want[:3], R_pi])
    got = _np(rc.matrix_to_axis_angle(_t(batch), fast=True))
    np.testing.assert_allclose(got, np.concatenate([w[:3], w_pi]), atol=1e-7)
    # 6D: drop the last row, Gram-Schmidt it back
    d6 = _np(rc.matrix_to_rotation_6d(_t(want)))
    np.testing.assert_allclose(d6, want[:, :2, :].reshape(-1, 6), atol=0)
    np.testing.assert_allclose(_np(rc.rotation_6d_to_matrix(_t(d6))), want, atol=1e-12)
    raw = rng.normal(size=(4, 6))
    b1 = raw[:, :3] / np.linalg.norm(raw[:, :3], axis=1, keepdims=True)
    b2 = raw[:, 3:] - (b1 * raw[:, 3:]).sum(1, keepdims=True) * b1
    b2 /= np.linalg.norm(b2, axis=1, keepdims=True)
    np.testing.assert_allclose(_np(rc.rotation_6d_to_matrix(_t(raw))), np.stack([b1, b2, np.cross(b1, b2)], 1), atol=1e-12)


def test_so3_exp_log_hat_angles_and_acos_extrapolation():
    rc = rotations_page(lucid)
    lp = lie_page(lucid, rc)
    rng = np.random.default_rng(4)
    v, u = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    H = lp.hat(_t(v))
    np.testing.assert_allclose(_np(H), _np_hat(v), atol=0)
    np.testing.assert_allclose(np.einsum("nij,nj->ni", _np(H), u), np.cross(v, u), atol=1e-12)
    np.testing.assert_allclose(_np(lp.hat_inv(H)), v, atol=0)
    with pytest.raises(ValueError, match="not skew-symmetric"):
        lp.hat_inv(H + _t(np.eye(3)))
    w = _rand_axis_angles(rng, 8)
    R = lp.so3_exp_map(_t(w))
    np.testing.assert_allclose(_np(R), _np_rodrigues(w), atol=1e-12)
    np.testing.assert_allclose(np.array([_np_expm(_np_hat(x)) for x in w]), _np(R), atol=1e-10)
    np.testing.assert_allclose(_np(lp.so3_log_map(R)), w, atol=1e-9)
    np.testing.assert_allclose(_np(lp.so3_rotation_angle(R)), np.linalg.norm(w, axis=1), atol=1e-9)
    R2 = lp.so3_exp_map(_t(_rand_axis_angles(rng, 8)))
    R12 = _np(R) @ _np(R2).transpose(0, 2, 1)
    cos = (np.trace(R12, axis1=1, axis2=2) - 1) / 2
    np.testing.assert_allclose(_np(lp.so3_relative_angle(R, R2, cos_angle=True)), cos, atol=1e-12)
    np.testing.assert_allclose(_np(lp.so3_relative_angle(R, R2)), np.arccos(cos), atol=1e-9)
    with pytest.raises(ValueError, match="trace outside valid range"):
        lp.so3_rotation_angle(_t(2 * np.eye(3)[None]))
    # acos, linear outside the bounds with the slope at the bound
    x = np.linspace(-1.3, 1.3, 27)
    b = 0.9
    xt = _t(x, requires_grad=True)
    y = lp.acos_linear_extrapolation(xt, (-b, b))
    y.sum().backward()
    slope = -1 / math.sqrt(1 - b * b)
    want = np.where(x >= b, math.acos(b) + slope * (x - b),
                    np.where(x <= -b, math.acos(-b) + slope * (x + b), np.arccos(np.clip(x, -1, 1))))
    np.testing.assert_allclose(_np(y), want, atol=1e-12)
    want_g = np.where(np.abs(x) >= b, slope, -1 / np.sqrt(np.clip(1 - x * x, 1e-12, None)))
    np.testing.assert_allclose(_np(xt.grad), want_g, rtol=1e-10)
    with pytest.raises(ValueError, match="within"):
        lp.acos_linear_extrapolation(xt, (-1.0, 0.5))


def test_so3_and_quaternion_gradients_against_finite_differences():
    rc = rotations_page(lucid)
    lp = lie_page(lucid, rc)
    rng = np.random.default_rng(5)
    w = _rand_axis_angles(rng, 3, 0.3, 2.5)
    C = rng.normal(size=(3, 3, 3))

    def f_exp(wn):
        with lucid.no_grad():
            return float((lp.so3_exp_map(_t(wn)) * _t(C)).sum())

    wt = _t(w, requires_grad=True)
    (lp.so3_exp_map(wt) * _t(C)).sum().backward()
    np.testing.assert_allclose(_np(wt.grad), _fd(f_exp, w), rtol=1e-6, atol=1e-8)

    # log(exp(w)) == w, so the gradient of <log(exp(w)), c> is c; through matrix_to_quaternion's masked write
    c = rng.normal(size=(3, 3))
    wt = _t(w, requires_grad=True)
    (lp.so3_log_map(lp.so3_exp_map(wt)) * _t(c)).sum().backward()
    np.testing.assert_allclose(_np(wt.grad), c, atol=1e-8)

    # the log map alone, of R = exp(w): its gradient in R, contracted with dR/dw, against differences in w
    def f_log(wn):
        with lucid.no_grad():
            return float((lp.so3_log_map(_t(_np_rodrigues(wn))) * _t(c)).sum())

    Rt = _t(_np_rodrigues(w), requires_grad=True)
    (lp.so3_log_map(Rt) * _t(c)).sum().backward()
    dR = np.stack([_fd(lambda wn, i=i: _np_rodrigues(wn).reshape(-1)[i], w)
                   for i in range(27)])
    via_chain = np.tensordot(_np(Rt.grad).reshape(27), dR, axes=1)
    np.testing.assert_allclose(via_chain, _fd(f_log, w), rtol=1e-5, atol=1e-7)

    # quaternion_to_matrix of a non-unit quaternion
    q = rng.normal(size=(2, 4))
    D = rng.normal(size=(2, 3, 3))
    qt = _t(q, requires_grad=True)
    (rc.quaternion_to_matrix(qt) * _t(D)).sum().backward()
    np.testing.assert_allclose(_np(qt.grad), _fd(lambda qn: float((_np_quat_to_mat(qn) * D).sum()), q), rtol=1e-6, atol=1e-8)


def test_se3_exp_log_against_matrix_exponential():
    rc = rotations_page(lucid)
    lp = lie_page(lucid, rc)
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.normal(size=(5, 3)), _rand_axis_angles(rng, 5, 0.3, 2.5)], 1)
    M = lp.se3_exp_map(_t(x))
    Mn = _np(M)
    for k in range(5):
        twist = np.zeros((4, 4))
        twist[:3, :3] = _np_hat(x[k, 3:])
        twist[:3, 3] = x[k, :3]
        np.testing.assert_allclose(Mn[k], _np_expm(twist).T, atol=1e-10)
    np.testing.assert_allclose(Mn[:, :3, 3], 0.0, atol=0)
    np.testing.assert_allclose(Mn[:, 3, 3], 1.0, atol=0)
    np.testing.assert_allclose(_np(lp.se3_log_map(M)), x, atol=1e-9)
    with pytest.raises(ValueError, match="should be 0"):
        lp.se3_log_map(M.transpose(1, 2))
    with pytest.raises(ValueError, match=r"\(N, 6\)"):
        lp.se3_exp_map(_t(x[:, :5]))
    # gradient of the exponential map against differences
    C = rng.normal(size=(2, 4, 4))

    def f(xn):
        with lucid.no_grad():
            return float((lp.se3_exp_map(_t(xn)) * _t(C)).sum())

    xt = _t(x[:2], requires_grad=True)
    (lp.se3_exp_map(xt) * _t(C)).sum().backward()
    np.testing.assert_allclose(_np(xt.grad), _fd(f, x[:2]), rtol=1e-6, atol=1e-8)


def _np_row_rot(axis, deg):
    M = np.eye(4)
    M[:3, :3] = _np_axis(axis, math.radians(deg)).T
    return M


def test_transform3d_compose_inverse_points_and_normals():
    rc = rotations_page(lucid)
    tp = transform_page(lucid, rc)
    dev = lucid.get_default_device()
    rng = np.random.default_rng(7)
    t = tp.Transform3d(device=dev).scale(2.0, 0.5, 1.5).translate(1.0, 2.0, 3.0).rotate_axis_angle(30.0, axis="Z")
    S, T = np.diag([2.0, 0.5, 1.5, 1.0]), np.eye(4)
    T[3, :3] = [1.0, 2.0, 3.0]
    M = S @ T @ _np_row_rot("Z", 30.0)  # row vectors: scale, then translate, then rotate
    np.testing.assert_allclose(_np(t.get_matrix())[0], M, atol=1e-6)
    p = rng.normal(size=(6, 3)).astype(np.float32)
    pt = lucid.tensor(p)
    want = (np.concatenate([p, np.ones((6, 1))], 1) @ M)[:, :3]
    got = t.transform_points(pt)
    assert tuple(got.shape) == (6, 3)
    np.testing.assert_allclose(_np(got), want, atol=1e-5)
    for composed in (False, True):
        ti = t.inverse(invert_composed=composed)
        np.testing.assert_allclose(_np(ti.get_matrix())[0], np.linalg.inv(M), atol=1e-5)
        np.testing.assert_allclose(_np(ti.transform_points(got)), p, atol=1e-5)
    n = rng.normal(size=(6, 3)).astype(np.float32)
    np.testing.assert_allclose(_np(t.transform_normals(lucid.tensor(n))), n @ np.linalg.inv(M[:3, :3].T), atol=1e-5)
    # closed forms: a quarter turn about each axis (counter-clockwise, right-handed)
    for axis, src, dst in (("Z", [1, 0, 0], [0, 1, 0]), ("X", [0, 1, 0], [0, 0, 1]), ("Y", [0, 0, 1], [1, 0, 0])):
        r = tp.RotateAxisAngle(90.0, axis=axis, device=dev)
        np.testing.assert_allclose(_np(r.transform_points(lucid.tensor([src], dtype=lucid.float32))), [dst], atol=1e-6)
    # broadcasting a batch of 4 translations against one scale; stack; clone
    xyz = rng.normal(size=(4, 3)).astype(np.float32)
    tb = tp.Scale(0.5, device=dev).compose(tp.Translate(lucid.tensor(xyz), device=dev))
    assert len(tb) == 4
    gb = _np(tb.transform_points(pt))
    assert gb.shape == (4, 6, 3)
    np.testing.assert_allclose(gb, 0.5 * p[None] + xyz[:, None], atol=1e-6)
    st = t.stack(tp.Translate(1.0, 0.0, 0.0, device=dev))
    assert len(st) == 2
    np.testing.assert_allclose(_np(tp.Scale(lucid.tensor([2.0, 3.0]), device=dev).inverse().get_matrix()),
                               np.stack([np.diag([0.5, 0.5, 0.5, 1.0]), np.diag([1 / 3, 1 / 3, 1 / 3, 1.0])]), atol=1e-7)
    np.testing.assert_allclose(_np(t.clone().get_matrix()), _np(t.get_matrix()), atol=0)
    # eps clamps a zero homogeneous coordinate to +eps
    P = np.eye(4, dtype=np.float32)
    P[3, 3], P[2, 3] = 0.0, 1.0
    proj = tp.Transform3d(matrix=lucid.tensor(P))
    pts = np.array([[1.0, 2.0, 0.0], [1.0, -2.0, -4.0]], dtype=np.float32)
    np.testing.assert_allclose(_np(proj.transform_points(lucid.tensor(pts), eps=0.1)),
                               [[10.0, 20.0, 0.0], [-0.25, 0.5, 1.0]], atol=1e-6)
    with pytest.warns(UserWarning, match="not a valid rotation matrix"):
        tp.Rotate(lucid.tensor(np.diag([1.0, 2.0, 1.0]), dtype=lucid.float32), device=dev)
    with pytest.raises(ValueError, match="non-broadcastable sizes"):
        tp.Translate(lucid.zeros(2), lucid.zeros(3), 0.0, device=dev)
    # backprop through the construction: y = (x + t) * s
    tt = lucid.tensor([[0.1, -0.2, 0.3]], requires_grad=True)
    s = lucid.tensor([1.5], requires_grad=True)
    y = tp.Transform3d(device=dev).translate(tt).scale(s).transform_points(pt)
    y.sum().backward()
    np.testing.assert_allclose(_np(tt.grad), np.full((1, 3), 6 * 1.5), atol=1e-5)
    np.testing.assert_allclose(_np(s.grad), [(p + [0.1, -0.2, 0.3]).sum()], rtol=1e-5)


def _similar_clouds(rng, b=2, n=12, noise=0.0):
    X = rng.normal(size=(b, n, 3))
    R = _np_rodrigues(_rand_axis_angles(rng, b, 0.5, 2.5))
    T = rng.normal(size=(b, 3))
    s = rng.uniform(0.5, 2.0, size=b)
    Y = s[:, None, None] * X @ R + T[:, None] + noise * rng.normal(size=(b, n, 3))
    return X, Y, R, T, s


def test_corresponding_points_alignment_recovers_similarity_transforms():
    ap = alignment_page(lucid)
    rng = np.random.default_rng(8)
    X, Y, R, T, s = _similar_clouds(rng)
    out = ap.corresponding_points_alignment(_t(X), _t(Y), estimate_scale=True)
    np.testing.assert_allclose(_np(out.R), R, atol=1e-10)
    np.testing.assert_allclose(_np(out.T), T, atol=1e-10)
    np.testing.assert_allclose(_np(out.s), s, atol=1e-10)
    np.testing.assert_allclose(_np(ap._apply_similarity_transform(_t(X), out.R, out.T, out.s)), Y, atol=1e-10)
    # noisy, weighted: NumPy's Umeyama; list weights go through list_to_padded
    X, Y, _, _, _ = _similar_clouds(rng, noise=0.05)
    w = rng.uniform(0.1, 1.0, size=(2, 12))
    for weights in (_t(w), [_t(w[0]), _t(w[1])]):
        for scale in (True, False):
            got = ap.corresponding_points_alignment(_t(X), _t(Y), weights=weights, estimate_scale=scale)
            for k in range(2):
                Rn, Tn, sn = _np_umeyama(X[k], Y[k], w[k], scale)
                np.testing.assert_allclose(_np(got.R)[k], Rn, atol=1e-10)
                np.testing.assert_allclose(_np(got.T)[k], Tn, atol=1e-10)
                np.testing.assert_allclose(_np(got.s)[k], sn, atol=1e-10)
    # a mirrored cloud: the nearest proper rotation unless reflections are allowed
    Xm = X[:1]
    Ym = Xm @ np.diag([1.0, 1.0, -1.0])
    proper = ap.corresponding_points_alignment(_t(Xm), _t(Ym))
    assert np.linalg.det(_np(proper.R)[0]) == pytest.approx(1.0, abs=1e-10)
    mirror = ap.corresponding_points_alignment(_t(Xm), _t(Ym), allow_reflection=True)
    np.testing.assert_allclose(_np(mirror.R)[0], np.diag([1.0, 1.0, -1.0]), atol=1e-10)
    with pytest.warns(UserWarning, match="<= dim\\+1"):
        ap.corresponding_points_alignment(_t(X[:, :3]), _t(Y[:, :3]))
    with pytest.raises(ValueError, match="same first two dimensions"):
        ap.corresponding_points_alignment(_t(X), _t(Y), weights=_t(w[:, :5]))
    # gradients of (R, T, s) in Y through the SVD and det, against differences
    X, Y, _, _, _ = _similar_clouds(rng, b=1, n=5, noise=0.1)
    CR, CT, cs = rng.normal(size=(1, 3, 3)), rng.normal(size=(1, 3)), 0.7

    def f(Yn):
        with lucid.no_grad():
            o = ap.corresponding_points_alignment(_t(X), _t(Yn), weights=_t(w[:1, :5]), estimate_scale=True)
            return float((o.R * _t(CR)).sum() + (o.T * _t(CT)).sum() + cs * o.s.sum())

    Yt = _t(Y, requires_grad=True)
    o = ap.corresponding_points_alignment(_t(X), Yt, weights=_t(w[:1, :5]), estimate_scale=True)
    ((o.R * _t(CR)).sum() + (o.T * _t(CT)).sum() + cs * o.s.sum()).backward()
    np.testing.assert_allclose(_np(Yt.grad), _fd(f, Y), rtol=1e-5, atol=1e-7)


def test_iterative_closest_point_with_plain_knn():
    ap = alignment_page(lucid)
    rng = np.random.default_rng(9)
    X = rng.uniform(-1, 1, size=(1, 24, 3))
    R = _np_rodrigues(np.array([[0.1, -0.15, 0.08]]))
    T = np.array([[0.05, -0.1, 0.02]])
    perm = rng.permutation(24)
    Y = (X @ R + T[:, None])[:, perm]
    # the plain knn: squared distances and the gathered neighbours
    knn = ap.knn_points(_t(X), _t(Y), K=2, return_nn=True)
    d2 = ((X[0][:, None] - Y[0][None]) ** 2).sum(-1)
    order = np.argsort(d2, axis=1)[:, :2]
    np.testing.assert_array_equal(_np(knn.idx)[0], order)
    np.testing.assert_allclose(_np(knn.dists)[0], np.take_along_axis(d2, order, 1), atol=1e-12)
    np.testing.assert_allclose(_np(knn.knn)[0], Y[0][order], atol=0)
    sol = ap.iterative_closest_point(_t(X), _t(Y), max_iterations=30)
    assert sol.converged
    assert float(sol.rmse[0]) < 1e-8
    np.testing.assert_allclose(_np(sol.RTs.R), R, atol=1e-8)
    np.testing.assert_allclose(_np(sol.RTs.T), T, atol=1e-8)
    np.testing.assert_allclose(_np(sol.Xt), X @ R + T[:, None], atol=1e-8)
    assert len(sol.t_history) >= 2
    # started from the answer it converges in two iterations (relative rmse 0 on the second)
    init = ap.SimilarityTransform(_t(R), _t(T), _t(np.ones(1)))
    sol2 = ap.iterative_closest_point(_t(X), _t(Y), init_transform=init, max_iterations=5)
    assert sol2.converged and len(sol2.t_history) == 2
    # ops/utils: eyes, wmean
    np.testing.assert_allclose(_np(ap.eyes(3, 2, dtype=lucid.float64)), np.broadcast_to(np.eye(3), (2, 3, 3)), atol=0)
    w = rng.uniform(size=(1, 24))
    np.testing.assert_allclose(_np(ap.wmean(_t(X), _t(w)))[0, 0], (w[0] @ X[0]) / w.sum(), atol=1e-12)
    np.testing.assert_allclose(_np(ap.wmean(_t(X)))[0, 0], X[0].mean(0), atol=1e-12)
    with pytest.raises(ValueError, match="wmean: weights are not compatible"):
        ap.wmean(_t(X), _t(w[:, :5]))


def test_structures_padded_packed_lists():
    ap = alignment_page(lucid)
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(12.0).reshape(4, 3) + 100
    c = np.array([[7.0, 8.0, 9.0]])
    xs = [_t(a), _t(b), lucid.zeros(0, dtype=lucid.float64), _t(c)]
    pad = _np(ap.list_to_padded(xs, pad_value=-1.0))
    want = np.full((4, 4, 3), -1.0)
    want[0, :2], want[1], want[3, :1] = a, b, c
    np.testing.assert_array_equal(pad, want)
    np.testing.assert_array_equal(_np(ap.list_to_padded(xs, pad_size=(5, 4), pad_value=0.0))[1, :4, :3], b)
    back = ap.padded_to_list(_t(want), split_size=[2, 4, 0, 1])
    np.testing.assert_array_equal(_np(back[1]), b)
    assert [tuple(t.shape) for t in back] == [(2, 3), (4, 3), (0, 3), (1, 3)]
    back2 = ap.padded_to_list(_t(want), split_size=[(1, 2), (4, 3), (0, 0), (1, 1)])
    np.testing.assert_array_equal(_np(back2[0]), a[:1, :2])
    packed, num, first, to_list = ap.list_to_packed([_t(a), _t(b), _t(c)])
    np.testing.assert_array_equal(_np(packed), np.concatenate([a, b, c]))
    assert num.tolist() == [2, 4, 1] and first.tolist() == [0, 2, 6]
    assert to_list.tolist() == [0, 0, 1, 1, 1, 1, 2]
    assert [tuple(t.shape) for t in ap.packed_to_list(packed, [2, 4, 1])] == [(2, 3), (4, 3), (1, 3)]
    p3 = want[[0, 1, 3]]
    np.testing.assert_array_equal(_np(ap.padded_to_packed(_t(p3), split_size=[2, 4, 1])), np.concatenate([a, b, c]))
    np.testing.assert_array_equal(_np(ap.padded_to_packed(_t(p3), pad_value=-1.0)), np.concatenate([a, b, c]))
    with pytest.raises(ValueError, match="same number of dimensions"):
        ap.list_to_padded([_t(a), _t(np.zeros((2, 3, 1)))])


def test_look_at_view_transform_cameras():
    rc = rotations_page(lucid)
    tp = transform_page(lucid, rc)
    cp = cameras_page(lucid, tp)
    dev = lucid.get_default_device()
    dist, elev, azim = np.array([2.7, 3.0, 1.5]), np.array([30.0, -10.0, 80.0]), np.array([45.0, 160.0, -30.0])
    R, T = cp.look_at_view_transform(dist=dist.tolist(), elev=elev.tolist(), azim=azim.tolist(), device=dev)
    Rn, Tn = _np(R), _np(T)
    el, az = np.radians(elev), np.radians(azim)
    C = np.stack([dist * np.cos(el) * np.sin(az), dist * np.sin(el), dist * np.cos(el) * np.cos(az)], 1)
    z = -C / np.linalg.norm(C, axis=1, keepdims=True)
    x = np.cross([0.0, 1.0, 0.0], z)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(Rn, np.stack([x, np.cross(z, x), z], 2), atol=1e-6)
    np.testing.assert_allclose(np.linalg.det(Rn), 1.0, atol=1e-6)
    # the camera centre goes to the view origin, the object (at the world origin) to (0, 0, dist)
    np.testing.assert_allclose(np.einsum("ni,nij->nj", C, Rn) + Tn, 0.0, atol=1e-5)
    np.testing.assert_allclose(Tn, np.stack([np.zeros(3), np.zeros(3), dist], 1), atol=1e-5)
    w2v = cp.get_world_to_view_transform(R, T)
    np.testing.assert_allclose(_np(w2v.transform_points(lucid.tensor(C[:, None], dtype=lucid.float32))), 0.0, atol=1e-5)
    # eye / at given directly
    R2, T2 = cp.look_at_view_transform(eye=[[1.0, 2.0, 3.0]], at=[[0.0, 1.0, 0.0]], device=dev)
    zz = np.array([-1.0, -1.0, -3.0]) / math.sqrt(11.0)
    np.testing.assert_allclose(_np(R2)[0, :, 2], zz, atol=1e-6)
    np.testing.assert_allclose(_np(T2)[0], [0.0, 0.0, math.sqrt(11.0)] - np.array([0.0, 1.0, 0.0]) @ _np(R2)[0], atol=1e-5)
    pos = cp.camera_position_from_spherical_angles(2.0, 90.0, 0.0, device=dev)
    np.testing.assert_allclose(_np(pos), [[0.0, 2.0, 0.0]], atol=1e-6)
    with pytest.raises(ValueError, match="non-broadcastable"):
        cp.look_at_view_transform(dist=[1.0, 2.0], elev=[0.0, 1.0, 2.0], device=dev)


def test_one_hot_range_error_names_the_op_once():
    # matrix_to_quaternion's candidate pick goes through F.one_hot(argmax, num_classes=4); a class out of
    # range read "one_hot: one_hot: class values ..." (the op's own prefix, then bind's)
    F = lucid.nn.functional
    idx = lucid.tensor([0, 5], device="cpu")  # the range check reads values: a CPU tensor in every mode
    with pytest.raises(RuntimeError, match=r"^one_hot: class values must be in \[0, 4\), got range \[0, 5\]") as e:
        F.one_hot(idx, num_classes=4)
    assert str(e.value).count("one_hot") == 1
    np.testing.assert_array_equal(F.one_hot(lucid.tensor([2, 0], device="cpu"), num_classes=4).tolist(),
                                  [[0, 0, 1, 0], [1, 0, 0, 0]])


# ====================================================================== parity with PyTorch
def _compare(a, b, rtol, atol):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def _rotations_run(torch):
    rc = rotations_page(torch)
    lp = lie_page(torch, rc)
    rng = np.random.default_rng(31)
    T64 = lambda a, **kw: torch.tensor(np.asarray(a), dtype=torch.float64, **kw)  # noqa: E731
    out = {}
    q = rng.normal(size=(6, 4))
    qt = T64(q, requires_grad=True)
    R = rc.quaternion_to_matrix(qt)
    q2 = rc.matrix_to_quaternion(R)
    (q2 * T64(rng.normal(size=(6, 4)))).sum().backward()
    out["R"], out["q2"], out["q_grad"] = _np(R), _np(q2), _np(qt.grad)
    ang = rng.uniform(-1.2, 1.2, size=(4, 3))
    for conv in ("XYZ", "ZXZ", "YXZ", "XZX"):
        M = rc.euler_angles_to_matrix(T64(ang), conv)
        out["euler_" + conv] = _np(rc.matrix_to_euler_angles(M, conv))
    w = np.concatenate([_rand_axis_angles(rng, 5), np.zeros((1, 3)), np.array([[0.0, 0.6, 0.8]]) * math.pi])
    for fast in (False, True):
        out[f"aa_{fast}"] = _np(rc.axis_angle_to_matrix(T64(w), fast=fast))
        out[f"aa_back_{fast}"] = _np(rc.matrix_to_axis_angle(T64(out[f"aa_{fast}"]), fast=fast))
    out["q_apply"] = _np(rc.quaternion_apply(T64(q[:, None] / 2), T64(rng.normal(size=(1, 3, 3)))))
    out["6d"] = _np(rc.rotation_6d_to_matrix(T64(rng.normal(size=(3, 6)))))
    wt = T64(w[:5], requires_grad=True)
    Rw = lp.so3_exp_map(wt)
    lw = lp.so3_log_map(Rw)
    ((Rw * T64(rng.normal(size=(5, 3, 3)))).sum() + (lw ** 2).sum()).backward()
    out["exp"], out["log"], out["exp_grad"] = _np(Rw), _np(lw), _np(wt.grad)
    x = np.concatenate([rng.normal(size=(3, 3)), w[:3]], 1)
    xt = T64(x, requires_grad=True)
    M = lp.se3_exp_map(xt)
    (M * T64(rng.normal(size=(3, 4, 4)))).sum().backward()
    out["se3"], out["se3_log"], out["se3_grad"] = _np(M), _np(lp.se3_log_map(M.detach())), _np(xt.grad)
    out["rel"] = _np(lp.so3_relative_angle(Rw[:3], Rw[2:]))
    out["acos"] = _np(lp.acos_linear_extrapolation(T64(np.linspace(-1.2, 1.2, 9))))
    return out


def test_rotations_so3_se3_torch_parity():
    torch = pytest.importorskip("torch")
    # float64 throughout; only summation order and libm differ
    _compare(_rotations_run(lucid), _rotations_run(torch), rtol=1e-9, atol=1e-11)


def _geometry_run(torch, dev):
    rc = rotations_page(torch)
    tp = transform_page(torch, rc)
    ap = alignment_page(torch)
    cp = cameras_page(torch, tp)
    rng = np.random.default_rng(32)
    T64 = lambda a, **kw: torch.tensor(np.asarray(a), dtype=torch.float64, **kw)  # noqa: E731
    out = {}
    p = torch.tensor(rng.normal(size=(5, 3)).astype(np.float32))
    tt = torch.tensor(rng.normal(size=(2, 3)).astype(np.float32), requires_grad=True)
    t = (tp.Transform3d(device=dev).scale(1.5, 0.5, 2.0).translate(tt)
         .rotate_axis_angle(torch.tensor([20.0, -75.0]), axis="Y"))
    y = t.transform_points(p)
    (y ** 2).sum().backward()
    out["points"], out["points_grad"] = _np(y), _np(tt.grad)
    out["normals"] = _np(t.transform_normals(p))
    out["inverse"] = _np(t.inverse().get_matrix())
    X, Y, _, _, _ = _similar_clouds(rng, noise=0.05)
    w = rng.uniform(0.1, 1.0, size=(2, 12))
    Yt = T64(Y, requires_grad=True)
    o = ap.corresponding_points_alignment(T64(X), Yt, weights=T64(w), estimate_scale=True)
    (o.R.sum() + o.T.sum() + o.s.sum()).backward()
    out["R"], out["T"], out["s"], out["Y_grad"] = _np(o.R), _np(o.T), _np(o.s), _np(Yt.grad)
    Xi = rng.uniform(-1, 1, size=(1, 20, 3))
    Yi = Xi @ _np_rodrigues(np.array([[0.05, 0.1, -0.1]])) + 0.03
    sol = ap.iterative_closest_point(T64(Xi), T64(Yi[:, ::-1].copy()), max_iterations=10, estimate_scale=True)
    out["icp_R"], out["icp_rmse"] = _np(sol.RTs.R), _np(sol.rmse)
    out["padded"] = _np(ap.list_to_padded([T64(Xi[0, :3]), T64(Xi[0, :5])], pad_value=-2.0))
    R, T = cp.look_at_view_transform(dist=[2.0, 3.0], elev=[10.0, 40.0], azim=[0.0, 120.0], device=dev)
    out["cam_R"], out["cam_T"] = _np(R), _np(T)
    return out


def test_transform3d_alignment_cameras_torch_parity():
    torch = pytest.importorskip("torch")
    # float32 transforms and cameras (1e-5), float64 alignment
    _compare(_geometry_run(lucid, lucid.get_default_device()), _geometry_run(torch, "cpu"), rtol=1e-5, atol=1e-6)
