"""Diffusion-model code run on Lucid (``import lucid as torch``), batch 18:

- huggingface/diffusers ``schedulers/scheduling_ddpm_parallel.py`` (its ``DDPMScheduler`` parts are
  marked "Copied from diffusers.schedulers.scheduling_ddpm.DDPMScheduler"): ``betas_for_alpha_bar``
  (cosine and exp), ``rescale_zero_terminal_snr`` (in-place ``-=``/``*=`` on the square-rooted
  cumulative product), the ``linear``/``scaled_linear``/``squaredcos_cap_v2``/``sigmoid`` schedules,
  ``set_timesteps`` with the ``linspace``/``leading``/``trailing`` spacings and custom timesteps,
  ``_get_variance`` for every variance type, ``_threshold_sample`` (dynamic thresholding through
  ``torch.quantile``), ``step`` for the ``epsilon``/``sample``/``v_prediction`` types (and the
  learned-variance channel split), ``batch_step_no_noise`` (boolean-mask assignment), ``add_noise``,
  ``get_velocity`` and ``previous_timestep`` (``nonzero(as_tuple=True)``).
  Its ``scheduling_ddim.py`` (the version with ``v_prediction`` and ``variance_noise``): ``step`` with
  ``eta``, ``use_clipped_model_output`` and ``set_alpha_to_one``.
- facebookresearch/DiT ``diffusion/`` (OpenAI's improved-diffusion ``gaussian_diffusion.py``,
  ``losses.py`` and ``respace.py`` as DiT ships them): ``GaussianDiffusion`` (``q_mean_variance``,
  ``q_sample``, ``q_posterior_mean_variance``, ``p_mean_variance`` for the fixed-small/fixed-large/
  learned-range variances and epsilon/x0 means, ``p_sample``, ``ddim_sample``,
  ``ddim_reverse_sample``, ``_vb_terms_bpd``, the hybrid ``training_losses`` (MSE + VLB through a
  frozen mean), ``_prior_bpd``), ``normal_kl``, ``approx_standard_normal_cdf``,
  ``discretized_gaussian_log_likelihood``, ``space_timesteps`` and ``SpacedDiffusion`` with its
  ``_WrappedModel``.
- facebookresearch/DiT ``models.py``: ``modulate``, ``TimestepEmbedder`` (sinusoidal
  ``timestep_embedding``), ``LabelEmbedder`` with ``token_drop``, the adaLN-Zero ``DiTBlock``,
  ``FinalLayer``, ``DiT`` with its ``initialize_weights``, ``unpatchify`` (``einsum``) and
  ``forward_with_cfg``, and the NumPy ``get_2d_sincos_pos_embed``; timm's ``PatchEmbed``,
  ``Attention`` and ``Mlp`` (which it imports) are small local equivalents after timm's text.

Every check stands without PyTorch: NumPy re-derivations of each scheduler formula, Bayes' rule for
the Gaussian posterior, numerical integration for the KL, a telescoping sum for the discretized
likelihood, DDPM/DDIM samplers fed the true noise recovering ``x0``, float64 finite differences and a
tiny DiT's hybrid loss going down. The ``*_torch_parity`` tests run the same text on PyTorch.

- huggingface/diffusers ``scheduling_euler_discrete.py`` (an early version: ``sigmas`` through
  ``np.interp``, ``scale_model_input``, ``step`` with ``s_churn``/``s_tmin``/``s_tmax``, float
  timesteps found with ``(timesteps == t).nonzero().item()``, ``add_noise``) and
  ``scheduling_dpmsolver_multistep.py``: DPM-Solver and DPM-Solver++ (first/second/third order
  multistep updates, midpoint and Heun, the SDE variant with ``variance_noise``), Karras sigmas with
  ``_sigma_to_t``, the log-SNR clipping through ``torch.searchsorted(torch.flip(...), float)``,
  ``index_for_timestep``, ``add_noise``.
- diffusers ``models/embeddings.py``: ``get_timestep_embedding`` (flip, shift, scale, odd padding
  through ``F.pad``), ``Timesteps``/``TimestepEmbedding``, ``SinusoidalPositionalEmbedding``
  (strided in-place writes), ``PatchEmbed`` with its sin-cos table, recomputed for another size and
  SD3's centre crop, and the rotary ``get_1d_rotary_pos_embed`` (``repeat_interleave``,
  ``torch.polar``, ``torch.outer``) with ``apply_rotary_emb`` on both its real and complex
  (``view_as_complex``/``view_as_real``) paths.

Adapted: diffusers' ``ConfigMixin``/``register_to_config`` is a small stand-in that stores the
constructor's arguments in ``self.config``; ``randn_tensor`` draws from the ``generator`` when it is
a callable returning the noise (the tests hand a fixed NumPy draw so both libraries get the same
noise); ``deprecate`` is a no-op and the DPM-Solver's deprecated positional ``timestep`` arguments
and its ``deis``/``logrho`` aliases are left out, its ``_threshold_sample`` is DDPM's (the file's
"Copied from"); Euler's unused ``get_lms_coefficient`` (SciPy) is left out; DiT's
``p_mean_variance`` treats ``LEARNED`` like ``LEARNED_RANGE`` (DiT's text does so); timm's
``Attention`` takes its fused ``F.scaled_dot_product_attention`` path; the tiny DiT is trained in
``eval()`` mode so no random label drop enters (``token_drop`` is checked on its own); modules whose
buffers come from NumPy are moved to the default device, as on a GPU.

Fixed on the way: ``torch.searchsorted(sequence, python_number)`` made the number a host tensor, so
on a device (the strict stand-in, CuPy) it refused to mix it with the sequence; PyTorch takes a
Scalar wherever the sequence is (``test_searchsorted_python_scalar_goes_to_the_sequence_device``).
"""
import inspect
import math
from types import SimpleNamespace

import enum
import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


def _np(t):
    return np.array(t.detach().cpu().numpy(), dtype=np.float64)


# ======================================================================== diffusers schedulers
def register_to_config(init):
    """Stand-in for diffusers' ``register_to_config``: the bound arguments become ``self.config``."""
    sig = inspect.signature(init)

    def wrapper(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        self.config = SimpleNamespace(**{k: v for k, v in bound.arguments.items() if k != "self"})
        init(self, *args, **kwargs)

    return wrapper


def diffusers_page(torch):
    """scheduling_ddpm_parallel.py (DDPMScheduler's text) and scheduling_ddim.py, on ``torch``."""

    def randn_tensor(shape, generator=None, device=None, dtype=None):
        # diffusers.utils.torch_utils.randn_tensor; a callable generator hands the noise (tests)
        if callable(generator):
            return torch.tensor(generator(tuple(shape)), dtype=dtype, device=device)
        return torch.randn(shape, generator=generator, device=device, dtype=dtype)

    # Copied from diffusers.schedulers.scheduling_ddpm.betas_for_alpha_bar
    def betas_for_alpha_bar(
        num_diffusion_timesteps,
        max_beta=0.999,
        alpha_transform_type="cosine",
    ):
        if alpha_transform_type == "cosine":

            def alpha_bar_fn(t):
                return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

        elif alpha_transform_type == "exp":

            def alpha_bar_fn(t):
                return math.exp(t * -12.0)

        else:
            raise ValueError(f"Unsupported alpha_transform_type: {alpha_transform_type}")

        betas = []
        for i in range(num_diffusion_timesteps):
            t1 = i / num_diffusion_timesteps
            t2 = (i + 1) / num_diffusion_timesteps
            betas.append(min(1 - alpha_bar_fn(t2) / alpha_bar_fn(t1), max_beta))
        return torch.tensor(betas, dtype=torch.float32)

    # Copied from diffusers.schedulers.scheduling_ddim.rescale_zero_terminal_snr
    def rescale_zero_terminal_snr(betas):
        # Convert betas to alphas_bar_sqrt
        alphas = 1.0 - betas
        alphas_cumprod = torch.cumprod(alphas, dim=0)
        alphas_bar_sqrt = alphas_cumprod.sqrt()

        # Store old values.
        alphas_bar_sqrt_0 = alphas_bar_sqrt[0].clone()
        alphas_bar_sqrt_T = alphas_bar_sqrt[-1].clone()

        # Shift so the last timestep is zero.
        alphas_bar_sqrt -= alphas_bar_sqrt_T

        # Scale so the first timestep is back to the old value.
        alphas_bar_sqrt *= alphas_bar_sqrt_0 / (alphas_bar_sqrt_0 - alphas_bar_sqrt_T)

        # Convert alphas_bar_sqrt to betas
        alphas_bar = alphas_bar_sqrt**2  # Revert sqrt
        alphas = alphas_bar[1:] / alphas_bar[:-1]  # Revert cumprod
        alphas = torch.cat([alphas_bar[0:1], alphas])
        betas = 1 - alphas

        return betas

    class DDPMParallelScheduler:
        order = 1
        _is_ode_scheduler = False

        @register_to_config
        def __init__(
            self,
            num_train_timesteps=1000,
            beta_start=0.0001,
            beta_end=0.02,
            beta_schedule="linear",
            trained_betas=None,
            variance_type="fixed_small",
            clip_sample=True,
            prediction_type="epsilon",
            thresholding=False,
            dynamic_thresholding_ratio=0.995,
            clip_sample_range=1.0,
            sample_max_value=1.0,
            timestep_spacing="leading",
            steps_offset=0,
            rescale_betas_zero_snr=False,
        ):
            if trained_betas is not None:
                self.betas = torch.tensor(trained_betas, dtype=torch.float32)
            elif beta_schedule == "linear":
                self.betas = torch.linspace(beta_start, beta_end, num_train_timesteps, dtype=torch.float32)
            elif beta_schedule == "scaled_linear":
                # this schedule is very specific to the latent diffusion model.
                self.betas = torch.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=torch.float32) ** 2
            elif beta_schedule == "squaredcos_cap_v2":
                # Glide cosine schedule
                self.betas = betas_for_alpha_bar(num_train_timesteps)
            elif beta_schedule == "sigmoid":
                # GeoDiff sigmoid schedule
                betas = torch.linspace(-6, 6, num_train_timesteps)
                self.betas = torch.sigmoid(betas) * (beta_end - beta_start) + beta_start
            else:
                raise NotImplementedError(f"{beta_schedule} is not implemented for {self.__class__}")

            # Rescale for zero SNR
            if rescale_betas_zero_snr:
                self.betas = rescale_zero_terminal_snr(self.betas)

            self.alphas = 1.0 - self.betas
            self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)
            self.one = torch.tensor(1.0)

            # standard deviation of the initial noise distribution
            self.init_noise_sigma = 1.0

            # setable values
            self.custom_timesteps = False
            self.num_inference_steps = None
            self.timesteps = torch.from_numpy(np.arange(0, num_train_timesteps)[::-1].copy())

            self.variance_type = variance_type

        def scale_model_input(self, sample, timestep=None):
            return sample

        def set_timesteps(self, num_inference_steps=None, device=None, timesteps=None):
            if num_inference_steps is not None and timesteps is not None:
                raise ValueError("Can only pass one of `num_inference_steps` or `custom_timesteps`.")

            if timesteps is not None:
                for i in range(1, len(timesteps)):
                    if timesteps[i] >= timesteps[i - 1]:
                        raise ValueError("`custom_timesteps` must be in descending order.")

                if timesteps[0] >= self.config.num_train_timesteps:
                    raise ValueError(
                        f"`timesteps` must start before `self.config.train_timesteps`:"
                        f" {self.config.num_train_timesteps}."
                    )

                timesteps = np.array(timesteps, dtype=np.int64)
                self.custom_timesteps = True
            else:
                if num_inference_steps > self.config.num_train_timesteps:
                    raise ValueError(
                        f"`num_inference_steps`: {num_inference_steps} cannot be larger than `self.config.train_timesteps`:"
                        f" {self.config.num_train_timesteps} as the unet model trained with this scheduler can only handle"
                        f" maximal {self.config.num_train_timesteps} timesteps."
                    )

                self.num_inference_steps = num_inference_steps
                self.custom_timesteps = False

                # "linspace", "leading", "trailing" corresponds to annotation of Table 2. of https://arxiv.org/abs/2305.08891
                if self.config.timestep_spacing == "linspace":
                    timesteps = (
                        np.linspace(0, self.config.num_train_timesteps - 1, num_inference_steps)
                        .round()[::-1]
                        .copy()
                        .astype(np.int64)
                    )
                elif self.config.timestep_spacing == "leading":
                    step_ratio = self.config.num_train_timesteps // self.num_inference_steps
                    # creates integer timesteps by multiplying by ratio
                    # casting to int to avoid issues when num_inference_step is power of 3
                    timesteps = (np.arange(0, num_inference_steps) * step_ratio).round()[::-1].copy().astype(np.int64)
                    timesteps += self.config.steps_offset
                elif self.config.timestep_spacing == "trailing":
                    step_ratio = self.config.num_train_timesteps / self.num_inference_steps
                    # creates integer timesteps by multiplying by ratio
                    # casting to int to avoid issues when num_inference_step is power of 3
                    timesteps = np.round(np.arange(self.config.num_train_timesteps, 0, -step_ratio)).astype(np.int64)
                    timesteps -= 1
                else:
                    raise ValueError(
                        f"{self.config.timestep_spacing} is not supported. Please make sure to choose one of 'linspace', 'leading' or 'trailing'."
                    )

            self.timesteps = torch.from_numpy(timesteps).to(device)

        def _get_variance(self, t, predicted_variance=None, variance_type=None):
            prev_t = self.previous_timestep(t)

            alpha_prod_t = self.alphas_cumprod[t]
            alpha_prod_t_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
            current_beta_t = 1 - alpha_prod_t / alpha_prod_t_prev

            # For t > 0, compute predicted variance βt (see formula (6) and (7) from https://arxiv.org/pdf/2006.11239.pdf)
            # and sample from it to get previous sample
            # x_{t-1} ~ N(pred_prev_sample, variance) == add variance to pred_sample
            variance = (1 - alpha_prod_t_prev) / (1 - alpha_prod_t) * current_beta_t

            # we always take the log of variance, so clamp it to ensure it's not 0
            variance = torch.clamp(variance, min=1e-20)

            if variance_type is None:
                variance_type = self.config.variance_type

            # hacks - were probably added for training stability
            if variance_type == "fixed_small":
                variance = variance
            # for rl-diffuser https://arxiv.org/abs/2205.09991
            elif variance_type == "fixed_small_log":
                variance = torch.log(variance)
                variance = torch.exp(0.5 * variance)
            elif variance_type == "fixed_large":
                variance = current_beta_t
            elif variance_type == "fixed_large_log":
                # Glide max_log
                variance = torch.log(current_beta_t)
            elif variance_type == "learned":
                return predicted_variance
            elif variance_type == "learned_range":
                min_log = torch.log(variance)
                max_log = torch.log(current_beta_t)
                frac = (predicted_variance + 1) / 2
                variance = frac * max_log + (1 - frac) * min_log

            return variance

        def _threshold_sample(self, sample):
            dtype = sample.dtype
            batch_size, channels, *remaining_dims = sample.shape

            if dtype not in (torch.float32, torch.float64):
                sample = sample.float()  # upcast for quantile calculation, and clamp not implemented for cpu half

            # Flatten sample for doing quantile calculation along each image
            sample = sample.reshape(batch_size, channels * np.prod(remaining_dims))

            abs_sample = sample.abs()  # "a certain percentile absolute pixel value"

            s = torch.quantile(abs_sample, self.config.dynamic_thresholding_ratio, dim=1)
            s = torch.clamp(
                s, min=1, max=self.config.sample_max_value
            )  # When clamped to min=1, equivalent to standard clipping to [-1, 1]
            s = s.unsqueeze(1)  # (batch_size, 1) because clamp will broadcast along dim=0
            sample = torch.clamp(sample, -s, s) / s  # "we threshold xt0 to the range [-s, s] and then divide by s"

            sample = sample.reshape(batch_size, channels, *remaining_dims)
            sample = sample.to(dtype)

            return sample

        def step(self, model_output, timestep, sample, generator=None, return_dict=True):
            t = timestep

            prev_t = self.previous_timestep(t)

            if model_output.shape[1] == sample.shape[1] * 2 and self.variance_type in ["learned", "learned_range"]:
                model_output, predicted_variance = torch.split(model_output, sample.shape[1], dim=1)
            else:
                predicted_variance = None

            # 1. compute alphas, betas
            self.alphas_cumprod = self.alphas_cumprod.to(device=model_output.device)
            alpha_prod_t = self.alphas_cumprod[t]
            alpha_prod_t_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
            beta_prod_t = 1 - alpha_prod_t
            beta_prod_t_prev = 1 - alpha_prod_t_prev
            current_alpha_t = alpha_prod_t / alpha_prod_t_prev
            current_beta_t = 1 - current_alpha_t

            # 2. compute predicted original sample from predicted noise also called
            # "predicted x_0" of formula (15) from https://arxiv.org/pdf/2006.11239.pdf
            if self.config.prediction_type == "epsilon":
                pred_original_sample = (sample - beta_prod_t ** (0.5) * model_output) / alpha_prod_t ** (0.5)
            elif self.config.prediction_type == "sample":
                pred_original_sample = model_output
            elif self.config.prediction_type == "v_prediction":
                pred_original_sample = (alpha_prod_t**0.5) * sample - (beta_prod_t**0.5) * model_output
            else:
                raise ValueError(
                    f"prediction_type given as {self.config.prediction_type} must be one of `epsilon`, `sample` or"
                    " `v_prediction`  for the DDPMScheduler."
                )

            # 3. Clip or threshold "predicted x_0"
            if self.config.thresholding:
                pred_original_sample = self._threshold_sample(pred_original_sample)
            elif self.config.clip_sample:
                pred_original_sample = pred_original_sample.clamp(
                    -self.config.clip_sample_range, self.config.clip_sample_range
                )

            # 4. Compute coefficients for pred_original_sample x_0 and current sample x_t
            # See formula (7) from https://arxiv.org/pdf/2006.11239.pdf
            pred_original_sample_coeff = (alpha_prod_t_prev ** (0.5) * current_beta_t) / beta_prod_t
            current_sample_coeff = current_alpha_t ** (0.5) * beta_prod_t_prev / beta_prod_t

            # 5. Compute predicted previous sample µ_t
            # See formula (7) from https://arxiv.org/pdf/2006.11239.pdf
            pred_prev_sample = pred_original_sample_coeff * pred_original_sample + current_sample_coeff * sample

            # 6. Add noise
            variance = 0
            if t > 0:
                device = model_output.device
                variance_noise = randn_tensor(
                    model_output.shape, generator=generator, device=device, dtype=model_output.dtype
                )
                if self.variance_type == "fixed_small_log":
                    variance = self._get_variance(t, predicted_variance=predicted_variance) * variance_noise
                elif self.variance_type == "learned_range":
                    variance = self._get_variance(t, predicted_variance=predicted_variance)
                    variance = torch.exp(0.5 * variance) * variance_noise
                else:
                    variance = (self._get_variance(t, predicted_variance=predicted_variance) ** 0.5) * variance_noise

            pred_prev_sample = pred_prev_sample + variance

            if not return_dict:
                return (
                    pred_prev_sample,
                    pred_original_sample,
                )

            return SimpleNamespace(prev_sample=pred_prev_sample, pred_original_sample=pred_original_sample)

        def batch_step_no_noise(self, model_output, timesteps, sample):
            t = timesteps
            num_inference_steps = self.num_inference_steps if self.num_inference_steps else self.config.num_train_timesteps
            prev_t = t - self.config.num_train_timesteps // num_inference_steps

            t = t.view(-1, *([1] * (model_output.ndim - 1)))
            prev_t = prev_t.view(-1, *([1] * (model_output.ndim - 1)))

            if model_output.shape[1] == sample.shape[1] * 2 and self.variance_type in ["learned", "learned_range"]:
                model_output, predicted_variance = torch.split(model_output, sample.shape[1], dim=1)
            else:
                pass

            # 1. compute alphas, betas
            self.alphas_cumprod = self.alphas_cumprod.to(model_output.device)
            alpha_prod_t = self.alphas_cumprod[t]
            alpha_prod_t_prev = self.alphas_cumprod[torch.clip(prev_t, min=0)]
            alpha_prod_t_prev[prev_t < 0] = torch.tensor(1.0)

            beta_prod_t = 1 - alpha_prod_t
            beta_prod_t_prev = 1 - alpha_prod_t_prev
            current_alpha_t = alpha_prod_t / alpha_prod_t_prev
            current_beta_t = 1 - current_alpha_t

            # 2. compute predicted original sample from predicted noise also called
            # "predicted x_0" of formula (15) from https://arxiv.org/pdf/2006.11239.pdf
            if self.config.prediction_type == "epsilon":
                pred_original_sample = (sample - beta_prod_t ** (0.5) * model_output) / alpha_prod_t ** (0.5)
            elif self.config.prediction_type == "sample":
                pred_original_sample = model_output
            elif self.config.prediction_type == "v_prediction":
                pred_original_sample = (alpha_prod_t**0.5) * sample - (beta_prod_t**0.5) * model_output
            else:
                raise ValueError(
                    f"prediction_type given as {self.config.prediction_type} must be one of `epsilon`, `sample` or"
                    " `v_prediction`  for the DDPMParallelScheduler."
                )

            # 3. Clip or threshold "predicted x_0"
            if self.config.thresholding:
                pred_original_sample = self._threshold_sample(pred_original_sample)
            elif self.config.clip_sample:
                pred_original_sample = pred_original_sample.clamp(
                    -self.config.clip_sample_range, self.config.clip_sample_range
                )

            # 4. Compute coefficients for pred_original_sample x_0 and current sample x_t
            # See formula (7) from https://arxiv.org/pdf/2006.11239.pdf
            pred_original_sample_coeff = (alpha_prod_t_prev ** (0.5) * current_beta_t) / beta_prod_t
            current_sample_coeff = current_alpha_t ** (0.5) * beta_prod_t_prev / beta_prod_t

            # 5. Compute predicted previous sample µ_t
            # See formula (7) from https://arxiv.org/pdf/2006.11239.pdf
            pred_prev_sample = pred_original_sample_coeff * pred_original_sample + current_sample_coeff * sample

            return pred_prev_sample

        def add_noise(self, original_samples, noise, timesteps):
            # Make sure alphas_cumprod and timestep have same device and dtype as original_samples
            # Move the self.alphas_cumprod to device to avoid redundant CPU to GPU data movement
            # for the subsequent add_noise calls
            self.alphas_cumprod = self.alphas_cumprod.to(device=original_samples.device)
            alphas_cumprod = self.alphas_cumprod.to(dtype=original_samples.dtype)
            timesteps = timesteps.to(original_samples.device)

            sqrt_alpha_prod = alphas_cumprod[timesteps] ** 0.5
            sqrt_alpha_prod = sqrt_alpha_prod.flatten()
            while len(sqrt_alpha_prod.shape) < len(original_samples.shape):
                sqrt_alpha_prod = sqrt_alpha_prod.unsqueeze(-1)

            sqrt_one_minus_alpha_prod = (1 - alphas_cumprod[timesteps]) ** 0.5
            sqrt_one_minus_alpha_prod = sqrt_one_minus_alpha_prod.flatten()
            while len(sqrt_one_minus_alpha_prod.shape) < len(original_samples.shape):
                sqrt_one_minus_alpha_prod = sqrt_one_minus_alpha_prod.unsqueeze(-1)

            noisy_samples = sqrt_alpha_prod * original_samples + sqrt_one_minus_alpha_prod * noise
            return noisy_samples

        def get_velocity(self, sample, noise, timesteps):
            # Make sure alphas_cumprod and timestep have same device and dtype as sample
            self.alphas_cumprod = self.alphas_cumprod.to(device=sample.device)
            alphas_cumprod = self.alphas_cumprod.to(dtype=sample.dtype)
            timesteps = timesteps.to(sample.device)

            sqrt_alpha_prod = alphas_cumprod[timesteps] ** 0.5
            sqrt_alpha_prod = sqrt_alpha_prod.flatten()
            while len(sqrt_alpha_prod.shape) < len(sample.shape):
                sqrt_alpha_prod = sqrt_alpha_prod.unsqueeze(-1)

            sqrt_one_minus_alpha_prod = (1 - alphas_cumprod[timesteps]) ** 0.5
            sqrt_one_minus_alpha_prod = sqrt_one_minus_alpha_prod.flatten()
            while len(sqrt_one_minus_alpha_prod.shape) < len(sample.shape):
                sqrt_one_minus_alpha_prod = sqrt_one_minus_alpha_prod.unsqueeze(-1)

            velocity = sqrt_alpha_prod * noise - sqrt_one_minus_alpha_prod * sample
            return velocity

        def __len__(self):
            return self.config.num_train_timesteps

        def previous_timestep(self, timestep):
            if self.custom_timesteps or self.num_inference_steps:
                index = (self.timesteps == timestep).nonzero(as_tuple=True)[0][0]
                if index == self.timesteps.shape[0] - 1:
                    prev_t = torch.tensor(-1)
                else:
                    prev_t = self.timesteps[index + 1]
            else:
                prev_t = timestep - 1
            return prev_t

    class DDIMScheduler:
        @register_to_config
        def __init__(
            self,
            num_train_timesteps=1000,
            beta_start=0.0001,
            beta_end=0.02,
            beta_schedule="linear",
            trained_betas=None,
            clip_sample=True,
            set_alpha_to_one=True,
            steps_offset=0,
            prediction_type="epsilon",
        ):
            if trained_betas is not None:
                self.betas = torch.from_numpy(trained_betas)
            elif beta_schedule == "linear":
                self.betas = torch.linspace(beta_start, beta_end, num_train_timesteps, dtype=torch.float32)
            elif beta_schedule == "scaled_linear":
                # this schedule is very specific to the latent diffusion model.
                self.betas = (
                    torch.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=torch.float32) ** 2
                )
            elif beta_schedule == "squaredcos_cap_v2":
                # Glide cosine schedule
                self.betas = betas_for_alpha_bar(num_train_timesteps)
            else:
                raise NotImplementedError(f"{beta_schedule} does is not implemented for {self.__class__}")

            self.prediction_type = prediction_type

            self.alphas = 1.0 - self.betas
            self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)

            # At every step in ddim, we are looking into the previous alphas_cumprod
            # For the final step, there is no previous alphas_cumprod because we are already at 0
            # `set_alpha_to_one` decides whether we set this parameter simply to one or
            # whether we use the final alpha of the "non-previous" one.
            self.final_alpha_cumprod = torch.tensor(1.0) if set_alpha_to_one else self.alphas_cumprod[0]

            # standard deviation of the initial noise distribution
            self.init_noise_sigma = 1.0

            # setable values
            self.num_inference_steps = None
            self.timesteps = torch.from_numpy(np.arange(0, num_train_timesteps)[::-1].copy().astype(np.int64))

        def scale_model_input(self, sample, timestep=None):
            return sample

        def _get_variance(self, timestep, prev_timestep):
            alpha_prod_t = self.alphas_cumprod[timestep]
            alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod
            beta_prod_t = 1 - alpha_prod_t
            beta_prod_t_prev = 1 - alpha_prod_t_prev

            variance = (beta_prod_t_prev / beta_prod_t) * (1 - alpha_prod_t / alpha_prod_t_prev)

            return variance

        def set_timesteps(self, num_inference_steps, device=None):
            self.num_inference_steps = num_inference_steps
            step_ratio = self.config.num_train_timesteps // self.num_inference_steps
            # creates integer timesteps by multiplying by ratio
            # casting to int to avoid issues when num_inference_step is power of 3
            timesteps = (np.arange(0, num_inference_steps) * step_ratio).round()[::-1].copy().astype(np.int64)
            self.timesteps = torch.from_numpy(timesteps).to(device)
            self.timesteps += self.config.steps_offset

        def step(
            self,
            model_output,
            timestep,
            sample,
            eta=0.0,
            use_clipped_model_output=False,
            generator=None,
            variance_noise=None,
            return_dict=True,
        ):
            if self.num_inference_steps is None:
                raise ValueError(
                    "Number of inference steps is 'None', you need to run 'set_timesteps' after creating the scheduler"
                )

            # 1. get previous step value (=t-1)
            prev_timestep = timestep - self.config.num_train_timesteps // self.num_inference_steps

            # 2. compute alphas, betas
            alpha_prod_t = self.alphas_cumprod[timestep]
            alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod

            beta_prod_t = 1 - alpha_prod_t

            # 3. compute predicted original sample from predicted noise also called
            # "predicted x_0" of formula (12) from https://arxiv.org/pdf/2010.02502.pdf
            if self.prediction_type == "epsilon":
                pred_original_sample = (sample - beta_prod_t ** (0.5) * model_output) / alpha_prod_t ** (0.5)
            elif self.prediction_type == "sample":
                pred_original_sample = model_output
            elif self.prediction_type == "v_prediction":
                pred_original_sample = (alpha_prod_t**0.5) * sample - (beta_prod_t**0.5) * model_output
                # predict V
                model_output = (alpha_prod_t**0.5) * model_output + (beta_prod_t**0.5) * sample
            else:
                raise ValueError(
                    f"prediction_type given as {self.prediction_type} must be one of `epsilon`, `sample`, or"
                    " `v_prediction`"
                )

            # 4. Clip "predicted x_0"
            if self.config.clip_sample:
                pred_original_sample = torch.clamp(pred_original_sample, -1, 1)

            # 5. compute variance: "sigma_t(η)" -> see formula (16)
            # σ_t = sqrt((1 − α_t−1)/(1 − α_t)) * sqrt(1 − α_t/α_t−1)
            variance = self._get_variance(timestep, prev_timestep)
            std_dev_t = eta * variance ** (0.5)

            if use_clipped_model_output:
                # the model_output is always re-derived from the clipped x_0 in Glide
                model_output = (sample - alpha_prod_t ** (0.5) * pred_original_sample) / beta_prod_t ** (0.5)

            # 6. compute "direction pointing to x_t" of formula (12) from https://arxiv.org/pdf/2010.02502.pdf
            pred_sample_direction = (1 - alpha_prod_t_prev - std_dev_t**2) ** (0.5) * model_output

            # 7. compute x_t without "random noise" of formula (12) from https://arxiv.org/pdf/2010.02502.pdf
            prev_sample = alpha_prod_t_prev ** (0.5) * pred_original_sample + pred_sample_direction

            if eta > 0:
                # randn_like does not support generator https://github.com/pytorch/pytorch/issues/27072
                device = model_output.device
                if variance_noise is not None and generator is not None:
                    raise ValueError(
                        "Cannot pass both generator and variance_noise. Please make sure that either `generator` or"
                        " `variance_noise` stays `None`."
                    )

                if variance_noise is None:
                    variance_noise = torch.randn(
                        model_output.shape, generator=generator, device=device, dtype=model_output.dtype
                    )
                variance = self._get_variance(timestep, prev_timestep) ** (0.5) * eta * variance_noise

                prev_sample = prev_sample + variance

            if not return_dict:
                return (prev_sample,)

            return SimpleNamespace(prev_sample=prev_sample, pred_original_sample=pred_original_sample)

    return SimpleNamespace(
        betas_for_alpha_bar=betas_for_alpha_bar,
        rescale_zero_terminal_snr=rescale_zero_terminal_snr,
        DDPMParallelScheduler=DDPMParallelScheduler,
        DDIMScheduler=DDIMScheduler,
    )


def _alpha_bar_cos(t):
    return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2


def _fixed(seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return lambda shape: (scale * rng.standard_normal(shape)).astype(np.float32)


def test_diffusers_beta_schedules_and_zero_terminal_snr():
    d = diffusers_page(lucid)
    T = 12
    # cosine: the cumulative product telescopes to alpha_bar(t)/alpha_bar(0) (no beta hits the 0.999 cap)
    ac = np.cumprod(1 - _np(d.betas_for_alpha_bar(T)))
    want = np.array([_alpha_bar_cos((i + 1) / T) / _alpha_bar_cos(0) for i in range(T)])
    np.testing.assert_allclose(ac[:-1], want[:-1], rtol=2e-5)
    # the last cosine beta is capped at max_beta
    assert abs(float(d.betas_for_alpha_bar(T)[-1].item()) - 0.999) < 1e-6
    # exp: 1 - beta_i = exp(-12/T) for every i
    np.testing.assert_allclose(_np(d.betas_for_alpha_bar(T, alpha_transform_type="exp")), 1 - math.exp(-12 / T),
                               rtol=1e-5)
    with pytest.raises(ValueError, match="Unsupported alpha_transform_type"):
        d.betas_for_alpha_bar(T, alpha_transform_type="bogus")

    s = d.DDPMParallelScheduler(num_train_timesteps=T, beta_schedule="scaled_linear", beta_start=0.01, beta_end=0.09)
    np.testing.assert_allclose(_np(s.betas), np.linspace(0.1, 0.3, T) ** 2, rtol=1e-5)
    s = d.DDPMParallelScheduler(num_train_timesteps=T, beta_schedule="sigmoid", beta_start=0.01, beta_end=0.2)
    np.testing.assert_allclose(_np(s.betas), 1 / (1 + np.exp(-np.linspace(-6, 6, T))) * 0.19 + 0.01, rtol=1e-5)
    with pytest.raises(NotImplementedError):
        d.DDPMParallelScheduler(beta_schedule="quad")

    # rescale_zero_terminal_snr: sqrt(alpha_bar) becomes an affine map of the old one with
    # new[0] = old[0] and new[-1] = 0 (Algorithm 1 of arXiv:2305.08891)
    base = d.DDPMParallelScheduler(num_train_timesteps=T, beta_start=0.02, beta_end=0.3)
    old = np.sqrt(np.cumprod(1 - np.linspace(0.02, 0.3, T)))
    z = d.DDPMParallelScheduler(num_train_timesteps=T, beta_start=0.02, beta_end=0.3, rescale_betas_zero_snr=True)
    new = np.sqrt(np.maximum(_np(z.alphas_cumprod), 0))
    np.testing.assert_allclose(new, (old - old[-1]) * old[0] / (old[0] - old[-1]), atol=2e-6)
    assert float(z.alphas_cumprod[-1].item()) == 0.0 and float(z.betas[-1].item()) == 1.0
    np.testing.assert_allclose(_np(base.alphas_cumprod), old**2, rtol=1e-5)


def test_diffusers_set_timesteps_spacings():
    d = diffusers_page(lucid)
    expect = {  # worked by hand for T=10, 3 steps (np.round rounds 4.5 to 4)
        ("linspace", 0): [9, 4, 0],
        ("leading", 1): [7, 4, 1],
        ("trailing", 0): [9, 6, 2],
    }
    for (spacing, off), want in expect.items():
        s = d.DDPMParallelScheduler(num_train_timesteps=10, timestep_spacing=spacing, steps_offset=off)
        s.set_timesteps(3)
        assert s.timesteps.tolist() == want, spacing
        assert [int(s.previous_timestep(t)) for t in want] == want[1:] + [-1]
    s = d.DDPMParallelScheduler(num_train_timesteps=10)
    assert s.timesteps.tolist() == list(range(9, -1, -1)) and s.previous_timestep(5) == 4
    s.set_timesteps(timesteps=[8, 5, 1])
    assert s.custom_timesteps and s.timesteps.tolist() == [8, 5, 1]
    with pytest.raises(ValueError, match="descending"):
        s.set_timesteps(timesteps=[1, 5])
    with pytest.raises(ValueError, match="cannot be larger"):
        s.set_timesteps(11)
    with pytest.raises(ValueError, match="not supported"):
        d.DDPMParallelScheduler(num_train_timesteps=10, timestep_spacing="odd").set_timesteps(2)


def _ddpm_numpy(betas, t, prev_t):
    ac = np.cumprod(1 - np.asarray(betas, np.float64))
    a_t = ac[t]
    a_prev = ac[prev_t] if prev_t >= 0 else 1.0
    beta_t = 1 - a_t / a_prev
    return a_t, a_prev, beta_t, (1 - a_prev) / (1 - a_t) * beta_t


@pytest.mark.parametrize("prediction_type", ["epsilon", "sample", "v_prediction"])
def test_ddpm_step_is_the_gaussian_posterior(prediction_type):
    d = diffusers_page(lucid)
    T = 20
    s = d.DDPMParallelScheduler(num_train_timesteps=T, beta_start=0.01, beta_end=0.2, clip_sample=False,
                                prediction_type=prediction_type)
    s.set_timesteps(5)  # leading: [16, 12, 8, 4, 0]
    assert s.timesteps.tolist() == [16, 12, 8, 4, 0]
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, (2, 2, 3, 3)).astype(np.float32)
    eps = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    betas = np.linspace(0.01, 0.2, T, dtype=np.float32)
    for t, prev in [(12, 8), (4, 0), (0, -1)]:
        tt = lucid.tensor([t, t])
        xt = s.add_noise(lucid.tensor(x0), lucid.tensor(eps), tt)
        a_t, a_prev, beta_t, var = _ddpm_numpy(betas, t, prev)
        xt_np = math.sqrt(a_t) * x0 + math.sqrt(1 - a_t) * eps
        np.testing.assert_allclose(_np(xt), xt_np, atol=1e-5)
        out = {"epsilon": lucid.tensor(eps), "sample": lucid.tensor(x0),
               "v_prediction": s.get_velocity(lucid.tensor(x0), lucid.tensor(eps), tt)}[prediction_type]
        if prediction_type == "v_prediction":
            np.testing.assert_allclose(_np(out), math.sqrt(a_t) * eps - math.sqrt(1 - a_t) * x0, atol=1e-5)
        noise = _fixed(t)
        z = noise(x0.shape)
        res = s.step(out, t, xt, generator=_fixed(t))
        # the true model output recovers x0, and the mean is the posterior mean of q(x_{t-1} | x_t, x_0)
        np.testing.assert_allclose(_np(res.pred_original_sample), x0, atol=2e-4)
        mean = (math.sqrt(a_prev) * beta_t * x0 + math.sqrt(1 - beta_t) * (1 - a_prev) * xt_np) / (1 - a_t)
        want = mean + (math.sqrt(var) * z if t > 0 else 0)
        np.testing.assert_allclose(_np(res.prev_sample), want, atol=2e-4)


@pytest.mark.parametrize("variance_type", ["fixed_small", "fixed_small_log", "fixed_large", "fixed_large_log",
                                           "learned", "learned_range"])
def test_ddpm_variance_types(variance_type):
    d = diffusers_page(lucid)
    T = 10
    s = d.DDPMParallelScheduler(num_train_timesteps=T, beta_start=0.05, beta_end=0.3, variance_type=variance_type,
                                clip_sample=False)
    betas = np.linspace(0.05, 0.3, T, dtype=np.float32)
    t = 6
    a_t, a_prev, beta_t, var = _ddpm_numpy(betas, t, t - 1)
    pv = lucid.tensor(np.array([-0.5, 0.25], np.float32))
    got = s._get_variance(t, predicted_variance=pv)
    want = {
        "fixed_small": var,
        "fixed_small_log": math.sqrt(var),
        "fixed_large": beta_t,
        "fixed_large_log": math.log(beta_t),
        "learned": np.array([-0.5, 0.25]),
        "learned_range": (np.array([-0.5, 0.25]) + 1) / 2 * math.log(beta_t)
        + (1 - (np.array([-0.5, 0.25]) + 1) / 2) * math.log(var),
    }[variance_type]
    np.testing.assert_allclose(_np(got), want, rtol=1e-5)
    # step: the noise is scaled by the standard deviation the variance type stands for
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    eps = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    v = rng.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)
    learned = variance_type in ("learned", "learned_range")
    out = np.concatenate([eps, v], 1) if learned else eps
    z = _fixed(3)(x.shape)
    res = s.step(lucid.tensor(out), t, lucid.tensor(x), generator=_fixed(3), return_dict=False)
    x0 = (x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)
    mean = (math.sqrt(a_prev) * beta_t * x0 + math.sqrt(1 - beta_t) * (1 - a_prev) * x) / (1 - a_t)
    std = {
        "fixed_small": math.sqrt(var),
        "fixed_small_log": math.sqrt(var),
        "fixed_large": math.sqrt(beta_t),
        "fixed_large_log": None,  # ``log(beta) ** 0.5`` of a negative log: NaN
        "learned": None,
        "learned_range": np.exp(0.5 * ((v + 1) / 2 * math.log(beta_t) + (1 - (v + 1) / 2) * math.log(var))),
    }[variance_type]
    if variance_type in ("fixed_large_log", "learned"):
        # diffusers takes ``variance ** 0.5`` of a log-variance / raw value here: NaN where it is negative
        got = _np(res[0])
        neg = np.broadcast_to((v < 0) if variance_type == "learned" else True, x.shape)
        assert np.isnan(got[neg]).all()
        if variance_type == "learned":
            np.testing.assert_allclose(got[~neg], (mean + np.sqrt(np.abs(v)) * z)[~neg], atol=1e-5)
    else:
        np.testing.assert_allclose(_np(res[0]), mean + std * z, atol=1e-5)


def test_ddpm_dynamic_thresholding_and_clipping():
    d = diffusers_page(lucid)
    s = d.DDPMParallelScheduler(num_train_timesteps=10, thresholding=True, dynamic_thresholding_ratio=0.9,
                                sample_max_value=2.5, prediction_type="sample")
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 2, 4, 4)) * np.array([0.3, 1.5, 4.0])[:, None, None, None]).astype(np.float32)
    got = _np(s._threshold_sample(lucid.tensor(x)))
    flat = x.reshape(3, -1).astype(np.float64)
    q = np.clip(np.quantile(np.abs(flat), 0.9, axis=1), 1, 2.5)[:, None]
    want = (np.clip(flat, -q, q) / q).reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert q[0, 0] == 1.0 and 1.0 < q[1, 0] < 2.5 and q[2, 0] == 2.5  # the three regimes are exercised
    # float64 stays float64; a sample-prediction step with thresholding returns the thresholded x0
    assert s._threshold_sample(lucid.tensor(x.astype(np.float64))).dtype == lucid.float64
    res = s.step(lucid.tensor(x), 0, lucid.tensor(np.zeros_like(x)))
    np.testing.assert_allclose(_np(res.pred_original_sample), want, rtol=1e-5, atol=1e-6)
    s2 = d.DDPMParallelScheduler(num_train_timesteps=10, clip_sample_range=0.5, prediction_type="sample")
    res = s2.step(lucid.tensor(x), 0, lucid.tensor(x))
    assert np.abs(_np(res.pred_original_sample)).max() <= 0.5


def test_ddpm_batch_step_no_noise_and_true_noise_sampler_recovers_x0():
    d = diffusers_page(lucid)
    T = 12
    s = d.DDPMParallelScheduler(num_train_timesteps=T, beta_start=0.02, beta_end=0.3, clip_sample=False)
    s.set_timesteps(4)  # [9, 6, 3, 0]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 2, 2, 2)).astype(np.float32)
    eps = rng.standard_normal((4, 2, 2, 2)).astype(np.float32)
    ts = lucid.tensor([9, 6, 3, 0])
    got = _np(s.batch_step_no_noise(lucid.tensor(eps), ts, lucid.tensor(x)))
    betas = np.linspace(0.02, 0.3, T, dtype=np.float32)
    for i, (t, prev) in enumerate([(9, 6), (6, 3), (3, 0), (0, -1)]):
        a_t, a_prev, beta_t, _ = _ddpm_numpy(betas, t, prev)
        x0 = (x[i] - math.sqrt(1 - a_t) * eps[i]) / math.sqrt(a_t)
        mean = (math.sqrt(a_prev) * beta_t * x0 + math.sqrt(1 - beta_t) * (1 - a_prev) * x[i]) / (1 - a_t)
        np.testing.assert_allclose(got[i], mean, atol=2e-5)
    # the sampling loop fed the true noise of x_t (an oracle model) lands on x0 (last step: coefficient 1 on x0)
    x0 = rng.uniform(-0.9, 0.9, (1, 2, 3, 3)).astype(np.float32)
    ac = np.cumprod(1 - betas.astype(np.float64))
    sample = lucid.tensor(rng.standard_normal(x0.shape).astype(np.float32))
    for t in s.timesteps.tolist():
        xt = _np(sample)
        eps_true = (xt - math.sqrt(ac[t]) * x0) / math.sqrt(1 - ac[t])
        sample = s.step(lucid.tensor(eps_true.astype(np.float32)), t, sample, generator=_fixed(t)).prev_sample
    np.testing.assert_allclose(_np(sample), x0, atol=1e-4)


def test_ddim_eta0_with_true_noise_recovers_x0_and_eta_step_formula():
    d = diffusers_page(lucid)
    T = 20
    s = d.DDIMScheduler(num_train_timesteps=T, beta_start=0.01, beta_end=0.2, clip_sample=False, steps_offset=1)
    with pytest.raises(ValueError, match="set_timesteps"):
        s.step(lucid.zeros(1), 5, lucid.zeros(1))
    s.set_timesteps(4)
    assert s.timesteps.tolist() == [16, 11, 6, 1]
    ac = np.cumprod(1 - np.linspace(0.01, 0.2, T, dtype=np.float32).astype(np.float64))
    rng = np.random.default_rng(4)
    x0 = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    eps = rng.standard_normal((2, 3)).astype(np.float32)
    # eta = 0, the same noise all along (a deterministic DDIM path): every step stays on x_t of that noise
    sample = lucid.tensor((math.sqrt(ac[16]) * x0 + math.sqrt(1 - ac[16]) * eps).astype(np.float32))
    for t in s.timesteps.tolist():
        prev = t - 5
        res = s.step(lucid.tensor(eps), t, sample)
        a_prev = ac[prev] if prev >= 0 else 1.0
        np.testing.assert_allclose(_np(res.prev_sample), math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev) * eps,
                                   atol=1e-4)
        sample = res.prev_sample
    np.testing.assert_allclose(_np(sample), x0, atol=1e-4)  # set_alpha_to_one: the last step returns x0
    # eta > 0 with a given variance_noise, v-prediction, use_clipped_model_output, clip_sample
    s = d.DDIMScheduler(num_train_timesteps=T, beta_start=0.01, beta_end=0.2, prediction_type="v_prediction",
                        set_alpha_to_one=False)
    s.set_timesteps(4)  # [15, 10, 5, 0]
    x = rng.standard_normal((2, 3)).astype(np.float32) * 2
    v = rng.standard_normal((2, 3)).astype(np.float32)
    z = rng.standard_normal((2, 3)).astype(np.float32)
    for t, eta in [(10, 0.7), (0, 1.0)]:
        prev = t - 5
        a_t = ac[t]
        a_prev = ac[prev] if prev >= 0 else ac[0]
        res = s.step(lucid.tensor(v), t, lucid.tensor(x), eta=eta, use_clipped_model_output=True,
                     variance_noise=lucid.tensor(z))
        x0 = np.clip(math.sqrt(a_t) * x - math.sqrt(1 - a_t) * v, -1, 1)
        e = (x - math.sqrt(a_t) * x0) / math.sqrt(1 - a_t)
        var = (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)
        std = eta * math.sqrt(var)
        want = math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev - std**2) * e + std * z
        np.testing.assert_allclose(_np(res.pred_original_sample), x0, atol=1e-5)
        np.testing.assert_allclose(_np(res.prev_sample), want, atol=1e-4)
    with pytest.raises(ValueError, match="Cannot pass both"):
        s.step(lucid.tensor(v), 10, lucid.tensor(x), eta=0.5, generator=object(), variance_noise=lucid.tensor(z))


def _diffusers_run(torch):
    d = diffusers_page(torch)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 2, 3, 3)).astype(np.float32) * 1.5
    e = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    out = {}
    for vt in ["fixed_small", "learned_range"]:
        for pt in ["epsilon", "v_prediction"]:
            s = d.DDPMParallelScheduler(num_train_timesteps=16, beta_schedule="squaredcos_cap_v2", variance_type=vt,
                                        prediction_type=pt, thresholding=True, dynamic_thresholding_ratio=0.8,
                                        sample_max_value=1.7, timestep_spacing="trailing")
            s.set_timesteps(4)
            mo = e if vt == "learned_range" else e[:, :2]
            r = s.step(torch.tensor(mo), int(s.timesteps[1]), torch.tensor(x), generator=_fixed(5))
            out[vt, pt] = (r.prev_sample.numpy(), r.pred_original_sample.numpy())
    z = d.DDPMParallelScheduler(num_train_timesteps=16, rescale_betas_zero_snr=True, beta_schedule="scaled_linear")
    out["zsnr"] = z.betas.numpy()
    s = d.DDIMScheduler(num_train_timesteps=16)
    s.set_timesteps(4)
    out["ddim"] = s.step(torch.tensor(x), 8, torch.tensor(x * 0.5), eta=0.3,
                         variance_noise=torch.tensor(x)).prev_sample.numpy()
    return out


def test_diffusers_schedulers_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _diffusers_run(lucid), _diffusers_run(torch)
    for k in b:
        for u, v in zip(a[k] if isinstance(a[k], tuple) else (a[k],), b[k] if isinstance(b[k], tuple) else (b[k],)):
            np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-5, err_msg=str(k))


# ======================================================================== DiT's diffusion/ (IDDPM)
class ModelMeanType(enum.Enum):
    """
    Which type of output the model predicts.
    """

    PREVIOUS_X = enum.auto()  # the model predicts x_{t-1}
    START_X = enum.auto()  # the model predicts x_0
    EPSILON = enum.auto()  # the model predicts epsilon


class ModelVarType(enum.Enum):
    LEARNED = enum.auto()
    FIXED_SMALL = enum.auto()
    FIXED_LARGE = enum.auto()
    LEARNED_RANGE = enum.auto()


class LossType(enum.Enum):
    MSE = enum.auto()  # use raw MSE loss (and KL when learning variances)
    RESCALED_MSE = (
        enum.auto()
    )  # use raw MSE loss (with RESCALED_KL when learning variances)
    KL = enum.auto()  # use the variational lower-bound
    RESCALED_KL = enum.auto()  # like KL, but rescale to estimate the full VLB

    def is_vb(self):
        return self == LossType.KL or self == LossType.RESCALED_KL


def get_beta_schedule(beta_schedule, *, beta_start, beta_end, num_diffusion_timesteps):
    if beta_schedule == "quad":
        betas = (
                np.linspace(
                    beta_start ** 0.5,
                    beta_end ** 0.5,
                    num_diffusion_timesteps,
                    dtype=np.float64,
                )
                ** 2
        )
    elif beta_schedule == "linear":
        betas = np.linspace(beta_start, beta_end, num_diffusion_timesteps, dtype=np.float64)
    elif beta_schedule == "const":
        betas = beta_end * np.ones(num_diffusion_timesteps, dtype=np.float64)
    elif beta_schedule == "jsd":  # 1/T, 1/(T-1), 1/(T-2), ..., 1
        betas = 1.0 / np.linspace(
            num_diffusion_timesteps, 1, num_diffusion_timesteps, dtype=np.float64
        )
    else:
        raise NotImplementedError(beta_schedule)
    assert betas.shape == (num_diffusion_timesteps,)
    return betas


def get_named_beta_schedule(schedule_name, num_diffusion_timesteps):
    if schedule_name == "linear":
        # Linear schedule from Ho et al, extended to work for any number of
        # diffusion steps.
        scale = 1000 / num_diffusion_timesteps
        return get_beta_schedule(
            "linear",
            beta_start=scale * 0.0001,
            beta_end=scale * 0.02,
            num_diffusion_timesteps=num_diffusion_timesteps,
        )
    elif schedule_name == "squaredcos_cap_v2":
        return iddpm_betas_for_alpha_bar(
            num_diffusion_timesteps,
            lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2,
        )
    else:
        raise NotImplementedError(f"unknown beta schedule: {schedule_name}")


def iddpm_betas_for_alpha_bar(num_diffusion_timesteps, alpha_bar, max_beta=0.999):
    betas = []
    for i in range(num_diffusion_timesteps):
        t1 = i / num_diffusion_timesteps
        t2 = (i + 1) / num_diffusion_timesteps
        betas.append(min(1 - alpha_bar(t2) / alpha_bar(t1), max_beta))
    return np.array(betas)


def space_timesteps(num_timesteps, section_counts):
    if isinstance(section_counts, str):
        if section_counts.startswith("ddim"):
            desired_count = int(section_counts[len("ddim"):])
            for i in range(1, num_timesteps):
                if len(range(0, num_timesteps, i)) == desired_count:
                    return set(range(0, num_timesteps, i))
            raise ValueError(
                f"cannot create exactly {num_timesteps} steps with an integer stride"
            )
        section_counts = [int(x) for x in section_counts.split(",")]
    size_per = num_timesteps // len(section_counts)
    extra = num_timesteps % len(section_counts)
    start_idx = 0
    all_steps = []
    for i, section_count in enumerate(section_counts):
        size = size_per + (1 if i < extra else 0)
        if size < section_count:
            raise ValueError(
                f"cannot divide section of {size} steps into {section_count}"
            )
        if section_count <= 1:
            frac_stride = 1
        else:
            frac_stride = (size - 1) / (section_count - 1)
        cur_idx = 0.0
        taken_steps = []
        for _ in range(section_count):
            taken_steps.append(start_idx + round(cur_idx))
            cur_idx += frac_stride
        all_steps += taken_steps
        start_idx += size
    return set(all_steps)


def iddpm_page(torch):
    """DiT's diffusion/diffusion_utils.py, gaussian_diffusion.py and respace.py, on ``torch``."""
    th = torch

    def mean_flat(tensor):
        """
        Take the mean over all non-batch dimensions.
        """
        return tensor.mean(dim=list(range(1, len(tensor.shape))))

    def normal_kl(mean1, logvar1, mean2, logvar2):
        tensor = None
        for obj in (mean1, logvar1, mean2, logvar2):
            if isinstance(obj, th.Tensor):
                tensor = obj
                break
        assert tensor is not None, "at least one argument must be a Tensor"

        # Force variances to be Tensors. Broadcasting helps convert scalars to
        # Tensors, but it does not work for th.exp().
        logvar1, logvar2 = [
            x if isinstance(x, th.Tensor) else th.tensor(x).to(tensor)
            for x in (logvar1, logvar2)
        ]

        return 0.5 * (
            -1.0
            + logvar2
            - logvar1
            + th.exp(logvar1 - logvar2)
            + ((mean1 - mean2) ** 2) * th.exp(-logvar2)
        )

    def approx_standard_normal_cdf(x):
        return 0.5 * (1.0 + th.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * th.pow(x, 3))))

    def discretized_gaussian_log_likelihood(x, *, means, log_scales):
        assert x.shape == means.shape == log_scales.shape
        centered_x = x - means
        inv_stdv = th.exp(-log_scales)
        plus_in = inv_stdv * (centered_x + 1.0 / 255.0)
        cdf_plus = approx_standard_normal_cdf(plus_in)
        min_in = inv_stdv * (centered_x - 1.0 / 255.0)
        cdf_min = approx_standard_normal_cdf(min_in)
        log_cdf_plus = th.log(cdf_plus.clamp(min=1e-12))
        log_one_minus_cdf_min = th.log((1.0 - cdf_min).clamp(min=1e-12))
        cdf_delta = cdf_plus - cdf_min
        log_probs = th.where(
            x < -0.999,
            log_cdf_plus,
            th.where(x > 0.999, log_one_minus_cdf_min, th.log(cdf_delta.clamp(min=1e-12))),
        )
        assert log_probs.shape == x.shape
        return log_probs

    def _extract_into_tensor(arr, timesteps, broadcast_shape):
        res = torch.from_numpy(arr).to(device=timesteps.device)[timesteps].float()
        while len(res.shape) < len(broadcast_shape):
            res = res[..., None]
        return res + torch.zeros(broadcast_shape, device=timesteps.device)

    class GaussianDiffusion:
        def __init__(
                self,
                *,
                betas,
                model_mean_type,
                model_var_type,
                loss_type
        ):

            self.model_mean_type = model_mean_type
            self.model_var_type = model_var_type
            self.loss_type = loss_type

            # Use float64 for accuracy.
            betas = np.array(betas, dtype=np.float64)
            self.betas = betas
            assert len(betas.shape) == 1, "betas must be 1-D"
            assert (betas > 0).all() and (betas <= 1).all()

            self.num_timesteps = int(betas.shape[0])

            alphas = 1.0 - betas
            self.alphas_cumprod = np.cumprod(alphas, axis=0)
            self.alphas_cumprod_prev = np.append(1.0, self.alphas_cumprod[:-1])
            self.alphas_cumprod_next = np.append(self.alphas_cumprod[1:], 0.0)
            assert self.alphas_cumprod_prev.shape == (self.num_timesteps,)

            # calculations for diffusion q(x_t | x_{t-1}) and others
            self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)
            self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - self.alphas_cumprod)
            self.log_one_minus_alphas_cumprod = np.log(1.0 - self.alphas_cumprod)
            self.sqrt_recip_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod)
            self.sqrt_recipm1_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod - 1)

            # calculations for posterior q(x_{t-1} | x_t, x_0)
            self.posterior_variance = (
                    betas * (1.0 - self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
            )
            # below: log calculation clipped because the posterior variance is 0 at the beginning of the diffusion chain
            self.posterior_log_variance_clipped = np.log(
                np.append(self.posterior_variance[1], self.posterior_variance[1:])
            ) if len(self.posterior_variance) > 1 else np.array([])

            self.posterior_mean_coef1 = (
                    betas * np.sqrt(self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
            )
            self.posterior_mean_coef2 = (
                    (1.0 - self.alphas_cumprod_prev) * np.sqrt(alphas) / (1.0 - self.alphas_cumprod)
            )

        def q_mean_variance(self, x_start, t):
            mean = _extract_into_tensor(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start
            variance = _extract_into_tensor(1.0 - self.alphas_cumprod, t, x_start.shape)
            log_variance = _extract_into_tensor(self.log_one_minus_alphas_cumprod, t, x_start.shape)
            return mean, variance, log_variance

        def q_sample(self, x_start, t, noise=None):
            if noise is None:
                noise = torch.randn_like(x_start)
            assert noise.shape == x_start.shape
            return (
                    _extract_into_tensor(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start
                    + _extract_into_tensor(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise
            )

        def q_posterior_mean_variance(self, x_start, x_t, t):
            assert x_start.shape == x_t.shape
            posterior_mean = (
                    _extract_into_tensor(self.posterior_mean_coef1, t, x_t.shape) * x_start
                    + _extract_into_tensor(self.posterior_mean_coef2, t, x_t.shape) * x_t
            )
            posterior_variance = _extract_into_tensor(self.posterior_variance, t, x_t.shape)
            posterior_log_variance_clipped = _extract_into_tensor(
                self.posterior_log_variance_clipped, t, x_t.shape
            )
            assert (
                    posterior_mean.shape[0]
                    == posterior_variance.shape[0]
                    == posterior_log_variance_clipped.shape[0]
                    == x_start.shape[0]
            )
            return posterior_mean, posterior_variance, posterior_log_variance_clipped

        def p_mean_variance(self, model, x, t, clip_denoised=True, denoised_fn=None, model_kwargs=None):
            if model_kwargs is None:
                model_kwargs = {}

            B, C = x.shape[:2]
            assert t.shape == (B,)
            model_output = model(x, t, **model_kwargs)
            if isinstance(model_output, tuple):
                model_output, extra = model_output
            else:
                extra = None

            if self.model_var_type in [ModelVarType.LEARNED, ModelVarType.LEARNED_RANGE]:
                assert model_output.shape == (B, C * 2, *x.shape[2:])
                model_output, model_var_values = torch.split(model_output, C, dim=1)
                min_log = _extract_into_tensor(self.posterior_log_variance_clipped, t, x.shape)
                max_log = _extract_into_tensor(np.log(self.betas), t, x.shape)
                # The model_var_values is [-1, 1] for [min_var, max_var].
                frac = (model_var_values + 1) / 2
                model_log_variance = frac * max_log + (1 - frac) * min_log
                model_variance = torch.exp(model_log_variance)
            else:
                model_variance, model_log_variance = {
                    # for fixedlarge, we set the initial (log-)variance like so
                    # to get a better decoder log likelihood.
                    ModelVarType.FIXED_LARGE: (
                        np.append(self.posterior_variance[1], self.betas[1:]),
                        np.log(np.append(self.posterior_variance[1], self.betas[1:])),
                    ),
                    ModelVarType.FIXED_SMALL: (
                        self.posterior_variance,
                        self.posterior_log_variance_clipped,
                    ),
                }[self.model_var_type]
                model_variance = _extract_into_tensor(model_variance, t, x.shape)
                model_log_variance = _extract_into_tensor(model_log_variance, t, x.shape)

            def process_xstart(x):
                if denoised_fn is not None:
                    x = denoised_fn(x)
                if clip_denoised:
                    return x.clamp(-1, 1)
                return x

            if self.model_mean_type == ModelMeanType.START_X:
                pred_xstart = process_xstart(model_output)
            else:
                pred_xstart = process_xstart(
                    self._predict_xstart_from_eps(x_t=x, t=t, eps=model_output)
                )
            model_mean, _, _ = self.q_posterior_mean_variance(x_start=pred_xstart, x_t=x, t=t)

            assert model_mean.shape == model_log_variance.shape == pred_xstart.shape == x.shape
            return {
                "mean": model_mean,
                "variance": model_variance,
                "log_variance": model_log_variance,
                "pred_xstart": pred_xstart,
                "extra": extra,
            }

        def _predict_xstart_from_eps(self, x_t, t, eps):
            assert x_t.shape == eps.shape
            return (
                    _extract_into_tensor(self.sqrt_recip_alphas_cumprod, t, x_t.shape) * x_t
                    - _extract_into_tensor(self.sqrt_recipm1_alphas_cumprod, t, x_t.shape) * eps
            )

        def _predict_eps_from_xstart(self, x_t, t, pred_xstart):
            return (
                           _extract_into_tensor(self.sqrt_recip_alphas_cumprod, t, x_t.shape) * x_t - pred_xstart
                   ) / _extract_into_tensor(self.sqrt_recipm1_alphas_cumprod, t, x_t.shape)

        def p_sample(
                self,
                model,
                x,
                t,
                clip_denoised=True,
                denoised_fn=None,
                cond_fn=None,
                model_kwargs=None,
        ):
            out = self.p_mean_variance(
                model,
                x,
                t,
                clip_denoised=clip_denoised,
                denoised_fn=denoised_fn,
                model_kwargs=model_kwargs,
            )
            noise = torch.randn_like(x)
            nonzero_mask = (
                (t != 0).float().view(-1, *([1] * (len(x.shape) - 1)))
            )  # no noise when t == 0
            sample = out["mean"] + nonzero_mask * torch.exp(0.5 * out["log_variance"]) * noise
            return {"sample": sample, "pred_xstart": out["pred_xstart"]}

        def ddim_sample(
                self,
                model,
                x,
                t,
                clip_denoised=True,
                denoised_fn=None,
                cond_fn=None,
                model_kwargs=None,
                eta=0.0,
        ):
            out = self.p_mean_variance(
                model,
                x,
                t,
                clip_denoised=clip_denoised,
                denoised_fn=denoised_fn,
                model_kwargs=model_kwargs,
            )
            # Usually our model outputs epsilon, but we re-derive it
            # in case we used x_start or x_prev prediction.
            eps = self._predict_eps_from_xstart(x, t, out["pred_xstart"])

            alpha_bar = _extract_into_tensor(self.alphas_cumprod, t, x.shape)
            alpha_bar_prev = _extract_into_tensor(self.alphas_cumprod_prev, t, x.shape)
            sigma = (
                    eta
                    * torch.sqrt((1 - alpha_bar_prev) / (1 - alpha_bar))
                    * torch.sqrt(1 - alpha_bar / alpha_bar_prev)
            )
            # Equation 12.
            noise = torch.randn_like(x)
            mean_pred = (
                    out["pred_xstart"] * torch.sqrt(alpha_bar_prev)
                    + torch.sqrt(1 - alpha_bar_prev - sigma ** 2) * eps
            )
            nonzero_mask = (
                (t != 0).float().view(-1, *([1] * (len(x.shape) - 1)))
            )  # no noise when t == 0
            sample = mean_pred + nonzero_mask * sigma * noise
            return {"sample": sample, "pred_xstart": out["pred_xstart"]}

        def ddim_reverse_sample(
                self,
                model,
                x,
                t,
                clip_denoised=True,
                denoised_fn=None,
                cond_fn=None,
                model_kwargs=None,
                eta=0.0,
        ):
            assert eta == 0.0, "Reverse ODE only for deterministic path"
            out = self.p_mean_variance(
                model,
                x,
                t,
                clip_denoised=clip_denoised,
                denoised_fn=denoised_fn,
                model_kwargs=model_kwargs,
            )
            # Usually our model outputs epsilon, but we re-derive it
            # in case we used x_start or x_prev prediction.
            eps = (
                          _extract_into_tensor(self.sqrt_recip_alphas_cumprod, t, x.shape) * x
                          - out["pred_xstart"]
                  ) / _extract_into_tensor(self.sqrt_recipm1_alphas_cumprod, t, x.shape)
            alpha_bar_next = _extract_into_tensor(self.alphas_cumprod_next, t, x.shape)

            # Equation 12. reversed
            mean_pred = out["pred_xstart"] * torch.sqrt(alpha_bar_next) + torch.sqrt(1 - alpha_bar_next) * eps

            return {"sample": mean_pred, "pred_xstart": out["pred_xstart"]}

        def ddim_sample_loop_progressive(
                self,
                model,
                shape,
                noise=None,
                clip_denoised=True,
                denoised_fn=None,
                cond_fn=None,
                model_kwargs=None,
                device=None,
                progress=False,
                eta=0.0,
        ):
            if device is None:
                device = next(model.parameters()).device
            assert isinstance(shape, (tuple, list))
            if noise is not None:
                img = noise
            else:
                img = torch.randn(*shape, device=device)
            indices = list(range(self.num_timesteps))[::-1]

            for i in indices:
                t = torch.tensor([i] * shape[0], device=device)
                with torch.no_grad():
                    out = self.ddim_sample(
                        model,
                        img,
                        t,
                        clip_denoised=clip_denoised,
                        denoised_fn=denoised_fn,
                        cond_fn=cond_fn,
                        model_kwargs=model_kwargs,
                        eta=eta,
                    )
                    yield out
                    img = out["sample"]

        def ddim_sample_loop(self, model, shape, noise=None, clip_denoised=True, denoised_fn=None, cond_fn=None,
                             model_kwargs=None, device=None, progress=False, eta=0.0):
            final = None
            for sample in self.ddim_sample_loop_progressive(
                    model,
                    shape,
                    noise=noise,
                    clip_denoised=clip_denoised,
                    denoised_fn=denoised_fn,
                    cond_fn=cond_fn,
                    model_kwargs=model_kwargs,
                    device=device,
                    progress=progress,
                    eta=eta,
            ):
                final = sample
            return final["sample"]

        def _vb_terms_bpd(
                self, model, x_start, x_t, t, clip_denoised=True, model_kwargs=None
        ):
            true_mean, _, true_log_variance_clipped = self.q_posterior_mean_variance(
                x_start=x_start, x_t=x_t, t=t
            )
            out = self.p_mean_variance(
                model, x_t, t, clip_denoised=clip_denoised, model_kwargs=model_kwargs
            )
            kl = normal_kl(
                true_mean, true_log_variance_clipped, out["mean"], out["log_variance"]
            )
            kl = mean_flat(kl) / np.log(2.0)

            decoder_nll = -discretized_gaussian_log_likelihood(
                x_start, means=out["mean"], log_scales=0.5 * out["log_variance"]
            )
            assert decoder_nll.shape == x_start.shape
            decoder_nll = mean_flat(decoder_nll) / np.log(2.0)

            # At the first timestep return the decoder NLL,
            # otherwise return KL(q(x_{t-1}|x_t,x_0) || p(x_{t-1}|x_t))
            output = torch.where((t == 0), decoder_nll, kl)
            return {"output": output, "pred_xstart": out["pred_xstart"]}

        def training_losses(self, model, x_start, t, model_kwargs=None, noise=None):
            if model_kwargs is None:
                model_kwargs = {}
            if noise is None:
                noise = torch.randn_like(x_start)
            x_t = self.q_sample(x_start, t, noise=noise)

            terms = {}

            if self.loss_type == LossType.KL or self.loss_type == LossType.RESCALED_KL:
                terms["loss"] = self._vb_terms_bpd(
                    model=model,
                    x_start=x_start,
                    x_t=x_t,
                    t=t,
                    clip_denoised=False,
                    model_kwargs=model_kwargs,
                )["output"]
                if self.loss_type == LossType.RESCALED_KL:
                    terms["loss"] *= self.num_timesteps
            elif self.loss_type == LossType.MSE or self.loss_type == LossType.RESCALED_MSE:
                model_output = model(x_t, t, **model_kwargs)

                if self.model_var_type in [
                    ModelVarType.LEARNED,
                    ModelVarType.LEARNED_RANGE,
                ]:
                    B, C = x_t.shape[:2]
                    assert model_output.shape == (B, C * 2, *x_t.shape[2:])
                    model_output, model_var_values = torch.split(model_output, C, dim=1)
                    # Learn the variance using the variational bound, but don't let
                    # it affect our mean prediction.
                    frozen_out = torch.cat([model_output.detach(), model_var_values], dim=1)
                    terms["vb"] = self._vb_terms_bpd(
                        model=lambda *args, r=frozen_out: r,
                        x_start=x_start,
                        x_t=x_t,
                        t=t,
                        clip_denoised=False,
                    )["output"]
                    if self.loss_type == LossType.RESCALED_MSE:
                        # Divide by 1000 for equivalence with initial implementation.
                        # Without a factor of 1/1000, the VB term hurts the MSE term.
                        terms["vb"] *= self.num_timesteps / 1000.0

                target = {
                    ModelMeanType.PREVIOUS_X: self.q_posterior_mean_variance(
                        x_start=x_start, x_t=x_t, t=t
                    )[0],
                    ModelMeanType.START_X: x_start,
                    ModelMeanType.EPSILON: noise,
                }[self.model_mean_type]
                assert model_output.shape == target.shape == x_start.shape
                terms["mse"] = mean_flat((target - model_output) ** 2)
                if "vb" in terms:
                    terms["loss"] = terms["mse"] + terms["vb"]
                else:
                    terms["loss"] = terms["mse"]
            else:
                raise NotImplementedError(self.loss_type)

            return terms

        def _prior_bpd(self, x_start):
            batch_size = x_start.shape[0]
            t = torch.tensor([self.num_timesteps - 1] * batch_size, device=x_start.device)
            qt_mean, _, qt_log_variance = self.q_mean_variance(x_start, t)
            kl_prior = normal_kl(
                mean1=qt_mean, logvar1=qt_log_variance, mean2=0.0, logvar2=0.0
            )
            return mean_flat(kl_prior) / np.log(2.0)

    class SpacedDiffusion(GaussianDiffusion):
        def __init__(self, use_timesteps, **kwargs):
            self.use_timesteps = set(use_timesteps)
            self.timestep_map = []
            self.original_num_steps = len(kwargs["betas"])

            base_diffusion = GaussianDiffusion(**kwargs)  # pylint: disable=missing-kwoa
            last_alpha_cumprod = 1.0
            new_betas = []
            for i, alpha_cumprod in enumerate(base_diffusion.alphas_cumprod):
                if i in self.use_timesteps:
                    new_betas.append(1 - alpha_cumprod / last_alpha_cumprod)
                    last_alpha_cumprod = alpha_cumprod
                    self.timestep_map.append(i)
            kwargs["betas"] = np.array(new_betas)
            super().__init__(**kwargs)

        def p_mean_variance(
                self, model, *args, **kwargs
        ):  # pylint: disable=signature-differs
            return super().p_mean_variance(self._wrap_model(model), *args, **kwargs)

        def training_losses(
                self, model, *args, **kwargs
        ):  # pylint: disable=signature-differs
            return super().training_losses(self._wrap_model(model), *args, **kwargs)

        def _wrap_model(self, model):
            if isinstance(model, _WrappedModel):
                return model
            return _WrappedModel(
                model, self.timestep_map, self.original_num_steps
            )

        def _scale_timesteps(self, t):
            # Scaling is done by the wrapped model.
            return t

    class _WrappedModel:
        def __init__(self, model, timestep_map, original_num_steps):
            self.model = model
            self.timestep_map = timestep_map
            # self.rescale_timesteps = rescale_timesteps
            self.original_num_steps = original_num_steps

        def __call__(self, x, ts, **kwargs):
            map_tensor = th.tensor(self.timestep_map, device=ts.device, dtype=ts.dtype)
            new_ts = map_tensor[ts]
            # if self.rescale_timesteps:
            #     new_ts = new_ts.float() * (1000.0 / self.original_num_steps)
            return self.model(x, new_ts, **kwargs)

    return SimpleNamespace(
        mean_flat=mean_flat, normal_kl=normal_kl, approx_standard_normal_cdf=approx_standard_normal_cdf,
        discretized_gaussian_log_likelihood=discretized_gaussian_log_likelihood,
        GaussianDiffusion=GaussianDiffusion, SpacedDiffusion=SpacedDiffusion, _WrappedModel=_WrappedModel,
    )


def _gd(p, mean=ModelMeanType.EPSILON, var=ModelVarType.FIXED_SMALL, loss=LossType.MSE, T=10, spaced=None):
    kw = dict(betas=np.linspace(0.02, 0.25, T), model_mean_type=mean, model_var_type=var, loss_type=loss)
    if spaced is not None:
        return p.SpacedDiffusion(spaced, **kw)
    return p.GaussianDiffusion(**kw)


def test_iddpm_losses_closed_forms():
    p = iddpm_page(lucid)
    # normal_kl against a numerical integral of p log(p/q) (float64 grid)
    m1, lv1, m2, lv2 = 0.3, math.log(0.5), -0.4, math.log(1.7)
    x = np.linspace(-12, 12, 200001)
    pdf = lambda m, v: np.exp(-(x - m) ** 2 / (2 * v)) / np.sqrt(2 * np.pi * v)
    P, Q = pdf(m1, math.exp(lv1)), pdf(m2, math.exp(lv2))
    kl_int = np.trapezoid(P * np.log(P / Q), x) if hasattr(np, "trapezoid") else np.trapz(P * np.log(P / Q), x)
    got = p.normal_kl(lucid.tensor([m1], dtype=lucid.float64), lv1, m2, lucid.tensor([lv2], dtype=lucid.float64))
    assert abs(float(got.item()) - kl_int) < 1e-8
    # scalar log-variances are turned into tensors; KL(p || p) = 0
    assert abs(float(p.normal_kl(lucid.tensor([0.2]), 0.0, 0.2, 0.0).item())) < 1e-7
    # the tanh CDF approximation against erf: within 2e-4 over the real line, exact at 0
    z = np.linspace(-5, 5, 401)
    cdf = _np(p.approx_standard_normal_cdf(lucid.tensor(z, dtype=lucid.float64)))
    erf = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in z])
    assert np.abs(cdf - erf).max() < 2e-4 and abs(cdf[200] - 0.5) < 1e-15
    # the discretized likelihood telescopes: over the 256 pixel levels the probabilities sum to one
    levels = lucid.tensor(np.linspace(-1, 1, 256), dtype=lucid.float64)
    for mu, ls in [(0.1, math.log(0.3)), (-0.95, math.log(0.02)), (0.5, math.log(2.0))]:
        lp = p.discretized_gaussian_log_likelihood(levels, means=lucid.full((256,), mu, dtype=lucid.float64),
                                                   log_scales=lucid.full((256,), ls, dtype=lucid.float64))
        assert abs(np.exp(_np(lp)).sum() - 1.0) < 1e-9, (mu, ls)
    # one level: the log of the CDF difference over the bin of half-width 1/255
    lp = p.discretized_gaussian_log_likelihood(lucid.tensor([0.2]), means=lucid.tensor([0.0]),
                                               log_scales=lucid.tensor([math.log(0.5)]))
    c = lambda v: 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))
    assert abs(float(lp.item()) - math.log(c((0.2 + 1 / 255) / 0.5) - c((0.2 - 1 / 255) / 0.5))) < 1e-5


def test_iddpm_posterior_is_bayes_rule_and_p_mean_variance_combos():
    p = iddpm_page(lucid)
    T = 10
    betas = np.linspace(0.02, 0.25, T)
    ac = np.cumprod(1 - betas)
    rng = np.random.default_rng(10)
    x0 = rng.uniform(-1, 1, (3, 2, 2, 2))
    xt = rng.standard_normal((3, 2, 2, 2))
    t = lucid.tensor([7, 1, 0])
    g = _gd(p)
    mean, var, logvar = g.q_posterior_mean_variance(lucid.tensor(x0), lucid.tensor(xt), t)
    # Bayes: x_{t-1} ~ N(sqrt(ac_{t-1}) x0, 1 - ac_{t-1}) times x_t | x_{t-1} ~ N(sqrt(alpha_t) x_{t-1}, beta_t)
    for i, tt in enumerate([7, 1, 0]):
        ap = ac[tt - 1] if tt > 0 else 1.0
        prior_prec = 1 / (1 - ap) if tt > 0 else np.inf
        if tt > 0:
            post_var = 1 / (prior_prec + (1 - betas[tt]) / betas[tt])
            post_mean = post_var * (math.sqrt(ap) * x0[i] / (1 - ap) + math.sqrt(1 - betas[tt]) * xt[i] / betas[tt])
        else:  # x_{-1} = x0 exactly
            post_var, post_mean = 0.0, x0[i]
        np.testing.assert_allclose(_np(mean[i]), post_mean, atol=1e-5)
        np.testing.assert_allclose(_np(var[i]), post_var, atol=1e-7)
    # the clipped log variance uses var[1] at t = 0
    np.testing.assert_allclose(_np(logvar[2]), math.log(betas[1] * (1 - ac[0]) / (1 - ac[1])), rtol=1e-6)
    # q_mean_variance / q_sample
    m, v, lv = g.q_mean_variance(lucid.tensor(x0), t)
    np.testing.assert_allclose(_np(v[:, 0, 0, 0]), 1 - ac[[7, 1, 0]], rtol=1e-6)
    np.testing.assert_allclose(_np(lv[:, 0, 0, 0]), np.log(1 - ac[[7, 1, 0]]), rtol=1e-6)

    out = rng.standard_normal((3, 4, 2, 2))
    model = lambda x, ts: lucid.tensor(out, dtype=lucid.float32)
    for mt, vt in [(ModelMeanType.EPSILON, ModelVarType.FIXED_SMALL), (ModelMeanType.EPSILON, ModelVarType.FIXED_LARGE),
                   (ModelMeanType.START_X, ModelVarType.LEARNED_RANGE), (ModelMeanType.EPSILON, ModelVarType.LEARNED)]:
        g = _gd(p, mean=mt, var=vt)
        learned = vt in (ModelVarType.LEARNED, ModelVarType.LEARNED_RANGE)
        mo = (lambda x, ts: lucid.tensor(out[:, :2], dtype=lucid.float32)) if not learned else model
        r = g.p_mean_variance(mo, lucid.tensor(xt, dtype=lucid.float32), t, clip_denoised=True)
        o, vv = out[:, :2], out[:, 2:]
        T_ = [7, 1, 0]
        for i, tt in enumerate(T_):
            if mt == ModelMeanType.EPSILON:
                px = np.clip((xt[i] - math.sqrt(1 - ac[tt]) * o[i]) / math.sqrt(ac[tt]), -1, 1)
            else:
                px = np.clip(o[i], -1, 1)
            ap = ac[tt - 1] if tt > 0 else 1.0
            mean_np = (math.sqrt(ap) * betas[tt] * px + math.sqrt(1 - betas[tt]) * (1 - ap) * xt[i]) / (1 - ac[tt])
            pv = betas * (1 - np.append(1, ac[:-1])) / (1 - ac)
            if vt == ModelVarType.FIXED_SMALL:
                lvar = np.log(np.append(pv[1], pv[1:]))[tt]
            elif vt == ModelVarType.FIXED_LARGE:
                lvar = np.log(np.append(pv[1], betas[1:]))[tt]
            else:
                f = (vv[i] + 1) / 2
                lvar = f * np.log(betas[tt]) + (1 - f) * np.log(np.append(pv[1], pv[1:]))[tt]
            np.testing.assert_allclose(_np(r["pred_xstart"][i]), px, atol=1e-5)
            np.testing.assert_allclose(_np(r["mean"][i]), mean_np, atol=1e-5)
            np.testing.assert_allclose(_np(r["log_variance"][i]) + 0 * px, lvar + 0 * px, rtol=1e-5, atol=1e-6)
            # the fixed-small variance itself is not clipped: 0 at t = 0 (only its log is)
            var_np = pv[tt] if vt == ModelVarType.FIXED_SMALL else np.exp(lvar)
            np.testing.assert_allclose(_np(r["variance"][i]) + 0 * px, var_np + 0 * px, rtol=1e-5, atol=1e-12)


def test_iddpm_hybrid_loss_vb_terms_and_frozen_mean_gradient():
    p = iddpm_page(lucid)
    T = 10
    betas = np.linspace(0.02, 0.25, T)
    ac = np.cumprod(1 - betas)
    pv = betas * (1 - np.append(1, ac[:-1])) / (1 - ac)
    lpv = np.log(np.append(pv[1], pv[1:]))
    rng = np.random.default_rng(11)
    x0 = np.round(rng.uniform(-1, 1, (3, 2, 2, 2)) * 127.5) / 127.5
    noise = rng.standard_normal(x0.shape)
    out = rng.uniform(-0.9, 0.9, (3, 4, 2, 2))
    t = [5, 0, 9]
    c = lambda v: 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))

    def np_terms(out, loss_type):  # the hybrid loss re-derived in float64 NumPy
        mses, vbs = [], []
        for i, tt in enumerate(t):
            xt = math.sqrt(ac[tt]) * x0[i] + math.sqrt(1 - ac[tt]) * noise[i]
            eps, vv = out[i, :2], out[i, 2:]
            ap = ac[tt - 1] if tt > 0 else 1.0
            px = (xt - math.sqrt(1 - ac[tt]) * eps) / math.sqrt(ac[tt])
            mu = (math.sqrt(ap) * betas[tt] * px + math.sqrt(1 - betas[tt]) * (1 - ap) * xt) / (1 - ac[tt])
            f = (vv + 1) / 2
            lv = f * np.log(betas[tt]) + (1 - f) * lpv[tt]
            if tt == 0:  # decoder NLL over the pixel bin
                s = np.exp(-0.5 * lv)
                hi, lo = c(s * (x0[i] - mu + 1 / 255)), c(s * (x0[i] - mu - 1 / 255))
                lp = np.where(x0[i] < -0.999, np.log(hi), np.where(x0[i] > 0.999, np.log(1 - lo), np.log(hi - lo)))
                vb = -lp.mean() / math.log(2)
            else:  # KL(q(x_{t-1} | x_t, x_0) || p(x_{t-1} | x_t)) in bits
                tm = (math.sqrt(ap) * betas[tt] * x0[i] + math.sqrt(1 - betas[tt]) * (1 - ap) * xt) / (1 - ac[tt])
                kl = 0.5 * (-1 + lv - lpv[tt] + np.exp(lpv[tt] - lv) + (tm - mu) ** 2 * np.exp(-lv))
                vb = kl.mean() / math.log(2)
            if loss_type == LossType.RESCALED_MSE:
                vb *= T / 1000.0
            mses.append(((noise[i] - eps) ** 2).mean())
            vbs.append(vb)
        return np.array(mses), np.array(vbs)

    for loss_type in [LossType.MSE, LossType.RESCALED_MSE]:
        g = _gd(p, var=ModelVarType.LEARNED_RANGE, loss=loss_type)
        w = lucid.tensor(out, dtype=lucid.float64, requires_grad=True)
        terms = g.training_losses(lambda x, ts: w.float(), lucid.tensor(x0, dtype=lucid.float32), lucid.tensor(t),
                                  noise=lucid.tensor(noise, dtype=lucid.float32))
        mse, vb = np_terms(out, loss_type)
        np.testing.assert_allclose(_np(terms["mse"]), mse, atol=1e-5)
        np.testing.assert_allclose(_np(terms["vb"]), vb, rtol=2e-4, atol=1e-6)
        np.testing.assert_allclose(_np(terms["loss"]), mse + vb, rtol=2e-4, atol=1e-5)
        # the VLB term reaches only the variance channels: the mean channels' gradient is the MSE's
        terms["loss"].sum().backward()
        np.testing.assert_allclose(_np(w.grad)[:, :2], 2 * (out[:, :2] - noise) / 8, atol=1e-5)
        # and the variance channels' gradient is the VLB's, by float64 central differences
        fd = np.zeros_like(out)
        for idx in np.ndindex(*out.shape):
            if idx[1] < 2:
                continue
            e = np.zeros_like(out)
            e[idx] = 1e-6
            fd[idx] = (np_terms(out + e, loss_type)[1].sum() - np_terms(out - e, loss_type)[1].sum()) / 2e-6
        gv = _np(w.grad)[:, 2:]
        np.testing.assert_allclose(gv, fd[:, 2:], rtol=1e-3, atol=1e-3 * np.abs(fd).max())
        assert np.abs(fd[:, 2:]).max() > 1e-5
    # KL loss: the whole VLB term in bits, RESCALED_KL times T; the prior term in closed form
    g = _gd(p, var=ModelVarType.FIXED_SMALL, loss=LossType.RESCALED_KL)
    eps_model = lambda x, ts: lucid.tensor(noise[:, :2] * 0 + out[:, :2], dtype=lucid.float32)
    tk = g.training_losses(eps_model, lucid.tensor(x0, dtype=lucid.float32), lucid.tensor([4, 4, 4]),
                           noise=lucid.tensor(noise, dtype=lucid.float32))
    gk = _gd(p, var=ModelVarType.FIXED_SMALL, loss=LossType.KL)
    tk1 = gk.training_losses(eps_model, lucid.tensor(x0, dtype=lucid.float32), lucid.tensor([4, 4, 4]),
                             noise=lucid.tensor(noise, dtype=lucid.float32))
    np.testing.assert_allclose(_np(tk["loss"]), T * _np(tk1["loss"]), rtol=1e-5)
    prior = _np(g._prior_bpd(lucid.tensor(x0, dtype=lucid.float32)))
    m, v = math.sqrt(ac[-1]) * x0, 1 - ac[-1]
    want = (0.5 * (-1 - math.log(v) + v + m**2)).reshape(3, -1).mean(1) / math.log(2)
    np.testing.assert_allclose(prior, want, rtol=1e-5)


def test_iddpm_space_timesteps_and_spaced_ddim_with_true_noise_recovers_x0():
    p = iddpm_page(lucid)
    # the named schedules: Ho et al.'s linear one rescaled to T steps, the capped cosine one telescoping
    np.testing.assert_allclose(get_named_beta_schedule("linear", 50), np.linspace(0.002, 0.4, 50))
    b = get_named_beta_schedule("squaredcos_cap_v2", 8)
    np.testing.assert_allclose(np.cumprod(1 - b)[:-1],
                               [_alpha_bar_cos((i + 1) / 8) / _alpha_bar_cos(0) for i in range(7)])
    assert b[-1] == 0.999
    np.testing.assert_allclose(get_beta_schedule("quad", beta_start=0.04, beta_end=0.09, num_diffusion_timesteps=3),
                               [0.04, 0.0625, 0.09])
    jsd = get_beta_schedule("jsd", beta_start=0, beta_end=0, num_diffusion_timesteps=4)
    np.testing.assert_allclose(jsd, [1 / 4, 1 / 3, 1 / 2, 1])
    with pytest.raises(NotImplementedError):
        get_named_beta_schedule("cubic", 4)
    assert space_timesteps(100, "ddim10") == set(range(0, 100, 10))
    assert space_timesteps(10, [2, 3]) == {0, 4, 5, 7, 9}
    assert space_timesteps(300, "10,15,20") == space_timesteps(300, [10, 15, 20])
    assert len(space_timesteps(300, [10, 15, 20])) == 45
    with pytest.raises(ValueError, match="cannot divide section of 5 steps into 6"):
        space_timesteps(10, [6, 6])
    with pytest.raises(ValueError, match="cannot create exactly"):
        space_timesteps(10, "ddim7")
    T = 10
    betas = np.linspace(0.02, 0.25, T)
    ac = np.cumprod(1 - betas)
    use = space_timesteps(T, "ddim5")  # {0, 2, 4, 6, 8}
    sd = _gd(p, spaced=use, mean=ModelMeanType.EPSILON, var=ModelVarType.FIXED_SMALL)
    assert sd.timestep_map == [0, 2, 4, 6, 8] and sd.num_timesteps == 5
    np.testing.assert_allclose(sd.alphas_cumprod, ac[[0, 2, 4, 6, 8]], rtol=1e-12)
    rng = np.random.default_rng(12)
    x0 = rng.uniform(-0.9, 0.9, (2, 2, 2, 2)).astype(np.float32)
    seen = []

    def oracle(x, ts):  # the true noise of x_t under the original schedule at the mapped step
        seen.append(ts.tolist())
        a = lucid.tensor(ac[ts.cpu().numpy()].astype(np.float32)).view(-1, 1, 1, 1).to(x.device)
        return (x - a.sqrt() * lucid.tensor(x0).to(x.device)) / (1 - a).sqrt()

    oracle.parameters = lambda: iter([lucid.zeros(1)])
    noise = lucid.tensor(rng.standard_normal(x0.shape).astype(np.float32))
    sample = sd.ddim_sample_loop(oracle, x0.shape, noise=noise, clip_denoised=False)
    assert seen == [[8, 8], [6, 6], [4, 4], [2, 2], [0, 0]]
    np.testing.assert_allclose(_np(sample), x0, atol=1e-4)
    # ddim_reverse_sample is the inverse step along the same deterministic path
    xt = sd.q_sample(lucid.tensor(x0), lucid.tensor([2, 2]), noise=noise)
    up = sd.ddim_reverse_sample(oracle, xt, lucid.tensor([2, 2]), clip_denoised=False)["sample"]
    want = math.sqrt(ac[6]) * x0 + math.sqrt(1 - ac[6]) * _np(noise)
    np.testing.assert_allclose(_np(up), want, atol=1e-4)
    # p_sample at t = 0 adds no noise: the posterior mean, which is pred_xstart there
    r = sd.p_sample(oracle, xt, lucid.tensor([0, 0]), clip_denoised=False)
    np.testing.assert_allclose(_np(r["sample"]), _np(r["pred_xstart"]), atol=1e-6)


# ======================================================================== DiT models.py
def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False, extra_tokens=0):
    """
    grid_size: int of the grid height and width
    return:
    pos_embed: [grid_size*grid_size, embed_dim] or [1+grid_size*grid_size, embed_dim] (w/ or w/o cls_token)
    """
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)

    grid = grid.reshape([2, 1, grid_size, grid_size])
    pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token and extra_tokens > 0:
        pos_embed = np.concatenate([np.zeros([extra_tokens, embed_dim]), pos_embed], axis=0)
    return pos_embed


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0

    # use half of dimensions to encode grid_h
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # (H*W, D/2)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # (H*W, D/2)

    emb = np.concatenate([emb_h, emb_w], axis=1) # (H*W, D)
    return emb


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    """
    embed_dim: output dimension for each position
    pos: a list of positions to be encoded: size (M,)
    out: (M, D)
    """
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.
    omega = 1. / 10000**omega  # (D/2,)

    pos = pos.reshape(-1)  # (M,)
    out = np.einsum('m,d->md', pos, omega)  # (M, D/2), outer product

    emb_sin = np.sin(out) # (M, D/2)
    emb_cos = np.cos(out) # (M, D/2)

    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb


def dit_page(torch):
    """DiT's models.py on ``torch``, with local equivalents of timm's PatchEmbed, Attention and Mlp."""
    nn = torch.nn
    F = torch.nn.functional

    # ---- timm.models.vision_transformer / timm.layers equivalents (their text, trimmed)
    class PatchEmbed(nn.Module):
        def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768, bias=True):
            super().__init__()
            self.img_size = (img_size, img_size)
            self.patch_size = (patch_size, patch_size)
            self.grid_size = tuple([s // p for s, p in zip(self.img_size, self.patch_size)])
            self.num_patches = self.grid_size[0] * self.grid_size[1]
            self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=bias)
            self.norm = nn.Identity()

        def forward(self, x):
            x = self.proj(x)
            x = x.flatten(2).transpose(1, 2)  # NCHW -> NLC
            x = self.norm(x)
            return x

    class Attention(nn.Module):
        def __init__(self, dim, num_heads=8, qkv_bias=False, qk_norm=False, attn_drop=0., proj_drop=0.,
                     norm_layer=nn.LayerNorm):
            super().__init__()
            assert dim % num_heads == 0, 'dim should be divisible by num_heads'
            self.num_heads = num_heads
            self.head_dim = dim // num_heads
            self.scale = self.head_dim ** -0.5
            self.fused_attn = True

            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
            self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
            self.attn_drop = nn.Dropout(attn_drop)
            self.proj = nn.Linear(dim, dim)
            self.proj_drop = nn.Dropout(proj_drop)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            q, k = self.q_norm(q), self.k_norm(k)

            if self.fused_attn:
                x = F.scaled_dot_product_attention(
                    q, k, v,
                    dropout_p=self.attn_drop.p if self.training else 0.,
                )
            else:
                q = q * self.scale
                attn = q @ k.transpose(-2, -1)
                attn = attn.softmax(dim=-1)
                attn = self.attn_drop(attn)
                x = attn @ v

            x = x.transpose(1, 2).reshape(B, N, C)
            x = self.proj(x)
            x = self.proj_drop(x)
            return x

    class Mlp(nn.Module):
        def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, bias=True,
                     drop=0.):
            super().__init__()
            out_features = out_features or in_features
            hidden_features = hidden_features or in_features
            self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
            self.act = act_layer()
            self.drop1 = nn.Dropout(drop)
            self.norm = nn.Identity()
            self.fc2 = nn.Linear(hidden_features, out_features, bias=bias)
            self.drop2 = nn.Dropout(drop)

        def forward(self, x):
            x = self.fc1(x)
            x = self.act(x)
            x = self.drop1(x)
            x = self.norm(x)
            x = self.fc2(x)
            x = self.drop2(x)
            return x

    # ---- DiT models.py
    def modulate(x, shift, scale):
        return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)

    class TimestepEmbedder(nn.Module):
        """
        Embeds scalar timesteps into vector representations.
        """
        def __init__(self, hidden_size, frequency_embedding_size=256):
            super().__init__()
            self.mlp = nn.Sequential(
                nn.Linear(frequency_embedding_size, hidden_size, bias=True),
                nn.SiLU(),
                nn.Linear(hidden_size, hidden_size, bias=True),
            )
            self.frequency_embedding_size = frequency_embedding_size

        @staticmethod
        def timestep_embedding(t, dim, max_period=10000):
            # https://github.com/openai/glide-text2im/blob/main/glide_text2im/nn.py
            half = dim // 2
            freqs = torch.exp(
                -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
            ).to(device=t.device)
            args = t[:, None].float() * freqs[None]
            embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
            if dim % 2:
                embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
            return embedding

        def forward(self, t):
            t_freq = self.timestep_embedding(t, self.frequency_embedding_size)
            t_emb = self.mlp(t_freq)
            return t_emb

    class LabelEmbedder(nn.Module):
        """
        Embeds class labels into vector representations. Also handles label dropout for classifier-free guidance.
        """
        def __init__(self, num_classes, hidden_size, dropout_prob):
            super().__init__()
            use_cfg_embedding = dropout_prob > 0
            self.embedding_table = nn.Embedding(num_classes + use_cfg_embedding, hidden_size)
            self.num_classes = num_classes
            self.dropout_prob = dropout_prob

        def token_drop(self, labels, force_drop_ids=None):
            """
            Drops labels to enable classifier-free guidance.
            """
            if force_drop_ids is None:
                drop_ids = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
            else:
                drop_ids = force_drop_ids == 1
            labels = torch.where(drop_ids, self.num_classes, labels)
            return labels

        def forward(self, labels, train, force_drop_ids=None):
            use_dropout = self.dropout_prob > 0
            if (train and use_dropout) or (force_drop_ids is not None):
                labels = self.token_drop(labels, force_drop_ids)
            embeddings = self.embedding_table(labels)
            return embeddings

    class DiTBlock(nn.Module):
        """
        A DiT block with adaptive layer norm zero (adaLN-Zero) conditioning.
        """
        def __init__(self, hidden_size, num_heads, mlp_ratio=4.0, **block_kwargs):
            super().__init__()
            self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
            self.attn = Attention(hidden_size, num_heads=num_heads, qkv_bias=True, **block_kwargs)
            self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
            mlp_hidden_dim = int(hidden_size * mlp_ratio)
            approx_gelu = lambda: nn.GELU(approximate="tanh")
            self.mlp = Mlp(in_features=hidden_size, hidden_features=mlp_hidden_dim, act_layer=approx_gelu, drop=0)
            self.adaLN_modulation = nn.Sequential(
                nn.SiLU(),
                nn.Linear(hidden_size, 6 * hidden_size, bias=True)
            )

        def forward(self, x, c):
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
            x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
            x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
            return x

    class FinalLayer(nn.Module):
        """
        The final layer of DiT.
        """
        def __init__(self, hidden_size, patch_size, out_channels):
            super().__init__()
            self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
            self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels, bias=True)
            self.adaLN_modulation = nn.Sequential(
                nn.SiLU(),
                nn.Linear(hidden_size, 2 * hidden_size, bias=True)
            )

        def forward(self, x, c):
            shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
            x = modulate(self.norm_final(x), shift, scale)
            x = self.linear(x)
            return x

    class DiT(nn.Module):
        """
        Diffusion model with a Transformer backbone.
        """
        def __init__(
            self,
            input_size=32,
            patch_size=2,
            in_channels=4,
            hidden_size=1152,
            depth=28,
            num_heads=16,
            mlp_ratio=4.0,
            class_dropout_prob=0.1,
            num_classes=1000,
            learn_sigma=True,
        ):
            super().__init__()
            self.learn_sigma = learn_sigma
            self.in_channels = in_channels
            self.out_channels = in_channels * 2 if learn_sigma else in_channels
            self.patch_size = patch_size
            self.num_heads = num_heads

            self.x_embedder = PatchEmbed(input_size, patch_size, in_channels, hidden_size, bias=True)
            self.t_embedder = TimestepEmbedder(hidden_size)
            self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
            num_patches = self.x_embedder.num_patches
            # Will use fixed sin-cos embedding:
            self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, hidden_size), requires_grad=False)

            self.blocks = nn.ModuleList([
                DiTBlock(hidden_size, num_heads, mlp_ratio=mlp_ratio) for _ in range(depth)
            ])
            self.final_layer = FinalLayer(hidden_size, patch_size, self.out_channels)
            self.initialize_weights()

        def initialize_weights(self):
            # Initialize transformer layers:
            def _basic_init(module):
                if isinstance(module, nn.Linear):
                    torch.nn.init.xavier_uniform_(module.weight)
                    if module.bias is not None:
                        nn.init.constant_(module.bias, 0)
            self.apply(_basic_init)

            # Initialize (and freeze) pos_embed by sin-cos embedding:
            pos_embed = get_2d_sincos_pos_embed(self.pos_embed.shape[-1], int(self.x_embedder.num_patches ** 0.5))
            self.pos_embed.data.copy_(torch.from_numpy(pos_embed).float().unsqueeze(0))

            # Initialize patch_embed like nn.Linear (instead of nn.Conv2d):
            w = self.x_embedder.proj.weight.data
            nn.init.xavier_uniform_(w.view([w.shape[0], -1]))

            # Initialize label embedding table:
            nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)

            # Initialize timestep embedding MLP:
            nn.init.normal_(self.t_embedder.mlp[0].weight, std=0.02)
            nn.init.normal_(self.t_embedder.mlp[2].weight, std=0.02)

            # Zero-out adaLN modulation layers in DiT blocks:
            for block in self.blocks:
                nn.init.constant_(block.adaLN_modulation[-1].weight, 0)
                nn.init.constant_(block.adaLN_modulation[-1].bias, 0)

            # Zero-out output layers:
            nn.init.constant_(self.final_layer.adaLN_modulation[-1].weight, 0)
            nn.init.constant_(self.final_layer.adaLN_modulation[-1].bias, 0)
            nn.init.constant_(self.final_layer.linear.weight, 0)
            nn.init.constant_(self.final_layer.linear.bias, 0)

        def unpatchify(self, x):
            """
            x: (N, T, patch_size**2 * C)
            imgs: (N, H, W, C)
            """
            c = self.out_channels
            p = self.x_embedder.patch_size[0]
            h = w = int(x.shape[1] ** 0.5)
            assert h * w == x.shape[1]

            x = x.reshape(shape=(x.shape[0], h, w, p, p, c))
            x = torch.einsum('nhwpqc->nchpwq', x)
            imgs = x.reshape(shape=(x.shape[0], c, h * p, h * p))
            return imgs

        def forward(self, x, t, y):
            x = self.x_embedder(x) + self.pos_embed  # (N, T, D), where T = H * W / patch_size ** 2
            t = self.t_embedder(t)                   # (N, D)
            y = self.y_embedder(y, self.training)    # (N, D)
            c = t + y                                # (N, D)
            for block in self.blocks:
                x = block(x, c)                      # (N, T, D)
            x = self.final_layer(x, c)                # (N, T, patch_size ** 2 * out_channels)
            x = self.unpatchify(x)                   # (N, out_channels, H, W)
            return x

        def forward_with_cfg(self, x, t, y, cfg_scale):
            # https://github.com/openai/glide-text2im/blob/main/notebooks/text2im.ipynb
            half = x[: len(x) // 2]
            combined = torch.cat([half, half], dim=0)
            model_out = self.forward(combined, t, y)
            # For exact reproducibility reasons, we apply classifier-free guidance on only
            # three channels by default. The standard approach to cfg applies it to all channels.
            # This can be done by uncommenting the following line and commenting-out the line following that.
            # eps, rest = model_out[:, :self.in_channels], model_out[:, self.in_channels:]
            eps, rest = model_out[:, :3], model_out[:, 3:]
            cond_eps, uncond_eps = torch.split(eps, len(eps) // 2, dim=0)
            half_eps = uncond_eps + cfg_scale * (cond_eps - uncond_eps)
            eps = torch.cat([half_eps, half_eps], dim=0)
            return torch.cat([eps, rest], dim=1)

    return SimpleNamespace(modulate=modulate, TimestepEmbedder=TimestepEmbedder, LabelEmbedder=LabelEmbedder,
                           DiTBlock=DiTBlock, FinalLayer=FinalLayer, DiT=DiT)


_DIT = dict(input_size=4, patch_size=2, in_channels=3, hidden_size=8, depth=1, num_heads=2, mlp_ratio=2.0,
            class_dropout_prob=0.1, num_classes=3, learn_sigma=True)


def _load(torch, module, seed, scale=0.3):
    """Every parameter but the frozen pos_embed from a seeded NumPy generator (same on both libraries)."""
    rng = np.random.default_rng(seed)
    new = {}
    for k, v in module.state_dict().items():
        new[k] = v if "pos_embed" in k else torch.tensor(rng.uniform(-scale, scale, tuple(v.shape)), dtype=v.dtype)
    module.load_state_dict(new)


def _dit_numpy(sd, x, t, y, cfg):
    """DiT's forward re-derived in float64 NumPy from a state dict."""
    g = lambda k: np.asarray(sd[k], np.float64)
    N, C, H, W = x.shape
    p, D, nh = cfg["patch_size"], cfg["hidden_size"], cfg["num_heads"]
    h = H // p
    # patch embedding: a stride-p convolution is a matmul over the p x p patches
    pt = x.reshape(N, C, h, p, h, p).transpose(0, 2, 4, 1, 3, 5).reshape(N, h * h, C * p * p)
    z = pt @ g("x_embedder.proj.weight").reshape(D, -1).T + g("x_embedder.proj.bias") + g("pos_embed")
    half = 128
    freqs = np.exp(-math.log(10000) * np.arange(half) / half)
    args = t[:, None].astype(np.float64) * freqs[None]
    tf = np.concatenate([np.cos(args), np.sin(args)], -1)
    silu = lambda a: a / (1 + np.exp(-a))
    lin = lambda a, k: a @ g(k + ".weight").T + g(k + ".bias")
    te = lin(silu(lin(tf, "t_embedder.mlp.0")), "t_embedder.mlp.2")
    c = te + g("y_embedder.embedding_table.weight")[y]
    ln = lambda a: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-6)
    mod = lambda a, sh, sc: a * (1 + sc[:, None]) + sh[:, None]
    gelu = lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))
    for b in range(cfg["depth"]):
        k = f"blocks.{b}."
        sh1, sc1, g1, sh2, sc2, g2 = np.split(lin(silu(c), k + "adaLN_modulation.1"), 6, axis=1)
        a = mod(ln(z), sh1, sc1)
        qkv = lin(a, k + "attn.qkv").reshape(N, -1, 3, nh, D // nh).transpose(2, 0, 3, 1, 4)
        q, kk, v = qkv
        s = q @ kk.transpose(0, 1, 3, 2) / math.sqrt(D // nh)
        s = np.exp(s - s.max(-1, keepdims=True))
        o = (s / s.sum(-1, keepdims=True)) @ v
        z = z + g1[:, None] * lin(o.transpose(0, 2, 1, 3).reshape(N, -1, D), k + "attn.proj")
        m = lin(gelu(lin(mod(ln(z), sh2, sc2), k + "mlp.fc1")), k + "mlp.fc2")
        z = z + g2[:, None] * m
    sh, sc = np.split(lin(silu(c), "final_layer.adaLN_modulation.1"), 2, axis=1)
    out = lin(mod(ln(z), sh, sc), "final_layer.linear")
    co = 2 * C if cfg["learn_sigma"] else C
    return out.reshape(N, h, h, p, p, co).transpose(0, 5, 1, 3, 2, 4).reshape(N, co, H, W)


def test_dit_embeddings_pos_embed_and_init():
    m = dit_page(lucid)
    t = lucid.tensor([0.0, 3.5, 999.0])
    for dim in [6, 7]:
        e = _np(m.TimestepEmbedder.timestep_embedding(t, dim))
        half = dim // 2
        f = np.exp(-math.log(10000) * np.arange(half) / half)
        a = np.array([0.0, 3.5, 999.0])[:, None] * f
        want = np.concatenate([np.cos(a), np.sin(a)] + ([np.zeros((3, 1))] if dim % 2 else []), 1)
        np.testing.assert_allclose(e, want, atol=2e-4)
        assert e.shape == (3, dim)
    # the 2-D sin-cos table: first half encodes the row (grid_h = meshgrid's w-first second plane), second the column
    pe = get_2d_sincos_pos_embed(8, 3)
    assert pe.shape == (9, 8)
    om = 1 / 10000 ** (np.arange(2) / 2)
    row, col = 1, 2  # token 5
    np.testing.assert_allclose(pe[5], np.concatenate([np.sin(col * om), np.cos(col * om),
                                                      np.sin(row * om), np.cos(row * om)]))
    lucid.manual_seed(0)
    model = m.DiT(**_DIT)
    np.testing.assert_allclose(_np(model.pos_embed)[0], get_2d_sincos_pos_embed(8, 2), atol=1e-7)
    assert model.pos_embed.requires_grad is False
    # adaLN-Zero: a fresh DiT outputs exactly zero, every block is the identity
    x = lucid.randn(2, 3, 4, 4)
    out = model(x, lucid.tensor([3, 7]), lucid.tensor([0, 2]))
    assert tuple(out.shape) == (2, 6, 4, 4) and float(out.abs().max().item()) == 0.0
    z = lucid.randn(2, 4, 8)
    assert float((model.blocks[0](z, lucid.randn(2, 8)) - z).abs().max().item()) == 0.0
    # the xavier-initialised patch embedding (as a Linear over C*p*p) stays within its bound
    bound = math.sqrt(6 / (8 + 12))
    w = _np(model.x_embedder.proj.weight)
    assert np.abs(w).max() <= bound and np.abs(w).max() > bound / 2
    # modulate and unpatchify in NumPy terms
    xx = np.arange(2 * 4 * 24, dtype=np.float32).reshape(2, 4, 24)
    got = _np(model.unpatchify(lucid.tensor(xx)))
    np.testing.assert_array_equal(got, xx.reshape(2, 2, 2, 2, 2, 6).transpose(0, 5, 1, 3, 2, 4).reshape(2, 6, 4, 4))
    sh, sc = np.ones((2, 3)), np.full((2, 3), 2.0)
    np.testing.assert_allclose(_np(m.modulate(lucid.ones(2, 5, 3), lucid.tensor(sh), lucid.tensor(sc))),
                               np.full((2, 5, 3), 4.0))


def test_dit_forward_label_drop_and_cfg_against_numpy():
    m = dit_page(lucid)
    lucid.manual_seed(0)
    model = m.DiT(**_DIT)
    _load(lucid, model, 1)
    model.eval()
    sd = {k: _np(v) for k, v in model.state_dict().items()}
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 4, 4)).astype(np.float32)
    t = np.array([1, 5, 5, 9])
    y = np.array([0, 2, 1, 3])  # 3 is the null (CFG) class
    out = _np(model(lucid.tensor(x), lucid.tensor(t), lucid.tensor(y)))
    np.testing.assert_allclose(out, _dit_numpy(sd, x, t, y, _DIT), atol=1e-4)
    # token_drop: forced ids become the null class; in training with p = 1 every label is dropped
    le = model.y_embedder
    assert le.token_drop(lucid.tensor([0, 1, 2]), lucid.tensor([1, 0, 1])).tolist() == [3, 1, 3]
    np.testing.assert_allclose(_np(le(lucid.tensor([0, 1]), False, force_drop_ids=lucid.tensor([1, 1]))),
                               sd["y_embedder.embedding_table.weight"][[3, 3]], atol=1e-7)
    le.dropout_prob = 1.0
    assert le.token_drop(lucid.tensor([0, 1, 2])).tolist() == [3, 3, 3]
    le.dropout_prob = 0.1
    # forward_with_cfg: guidance on the first three channels, the rest (the variance) as the model gives it
    xc = np.concatenate([x[:2], x[:2]])
    tc, yc = np.array([4, 6, 4, 6]), np.array([0, 2, 3, 3])
    got = _np(model.forward_with_cfg(lucid.tensor(np.concatenate([x[:2], x[2:]])), lucid.tensor(tc),
                                     lucid.tensor(yc), 4.0))
    full = _dit_numpy(sd, xc, tc, yc, _DIT)
    half = full[2:, :3] + 4.0 * (full[:2, :3] - full[2:, :3])
    np.testing.assert_allclose(got[:, :3], np.concatenate([half, half]), atol=3e-4)
    np.testing.assert_allclose(got[:, 3:], full[:, 3:], atol=1e-4)


def test_dit_float64_gradients_by_finite_differences():
    m = dit_page(lucid)
    lucid.manual_seed(0)
    model = m.DiT(**_DIT).double()
    _load(lucid, model, 3)
    model.eval()
    rng = np.random.default_rng(4)
    x = lucid.tensor(rng.standard_normal((2, 3, 4, 4)))
    t, y = lucid.tensor([2, 8]), lucid.tensor([1, 0])
    wt = lucid.tensor(rng.standard_normal((2, 6, 4, 4)))
    loss = (model(x, t, y) * wt).sum()
    loss.backward()
    for name in ["blocks.0.attn.qkv.weight", "blocks.0.adaLN_modulation.1.bias", "x_embedder.proj.weight",
                 "t_embedder.mlp.0.weight", "final_layer.linear.weight"]:
        prm = dict(model.named_parameters())[name]
        flat = prm.data.view(-1)
        for idx in [0, flat.shape[0] // 2, flat.shape[0] - 1]:
            old = float(flat[idx].item())
            vals = []
            for h in (1e-6, -1e-6):
                with lucid.no_grad():
                    flat[idx] = old + h
                    vals.append(float((model(x, t, y) * wt).sum().item()))
            with lucid.no_grad():
                flat[idx] = old
            fd = (vals[0] - vals[1]) / 2e-6
            assert abs(float(prm.grad.view(-1)[idx].item()) - fd) < 1e-6 * max(1, abs(fd)), (name, idx)


def dit_training_page(torch, steps=12):
    """A tiny DiT trained on DiT's hybrid loss (learned-range variance, MSE + VLB) with AdamW, as train.py."""
    m, p = dit_page(torch), iddpm_page(torch)
    torch.manual_seed(0)
    model = m.DiT(**_DIT)
    _load(torch, model, 5, scale=0.2)
    model.eval()  # no label dropout: the run is deterministic on both libraries
    diffusion = p.SpacedDiffusion(space_timesteps(50, "10"), betas=get_named_beta_schedule("linear", 50),
                                  model_mean_type=ModelMeanType.EPSILON, model_var_type=ModelVarType.LEARNED_RANGE,
                                  loss_type=LossType.MSE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0)
    rng = np.random.default_rng(6)
    x = torch.tensor(np.sign(rng.standard_normal((4, 3, 4, 4))).astype(np.float32) * 0.8)
    y = torch.tensor([0, 1, 2, 0])
    t = torch.tensor([0, 3, 6, 9])
    noise = torch.tensor(rng.standard_normal((4, 3, 4, 4)).astype(np.float32))
    losses = []
    for _ in range(steps):
        model_kwargs = dict(y=y)
        loss_dict = diffusion.training_losses(model, x, t, model_kwargs, noise=noise)
        loss = loss_dict["loss"].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def test_dit_hybrid_loss_training_goes_down():
    losses, _ = dit_training_page(lucid)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.6 * losses[0], losses


def test_dit_and_iddpm_torch_parity():
    torch = pytest.importorskip("torch")
    la, sa = dit_training_page(lucid)
    lb, sb = dit_training_page(torch)
    np.testing.assert_allclose(la, lb, rtol=2e-4, atol=1e-5)
    for k in sb:
        # the key bias of attention has a zero true gradient (softmax ignores a per-query constant):
        # Adam normalises each library's rounding noise there, so it only agrees to 1e-3
        tol = 1e-3 if k.endswith("attn.qkv.bias") else 2e-5
        np.testing.assert_allclose(sa[k], sb[k], rtol=1e-3, atol=tol, err_msg=k)
    # the scheduler pieces and a DDIM step on the same weights
    for mod in (lucid, torch):
        p = iddpm_page(mod)
        g = p.GaussianDiffusion(betas=np.linspace(0.02, 0.25, 10), model_mean_type=ModelMeanType.START_X,
                                model_var_type=ModelVarType.FIXED_LARGE, loss_type=LossType.KL)
        rng = np.random.default_rng(8)
        x0 = mod.tensor(np.round(rng.uniform(-1, 1, (3, 2, 2, 2)) * 127.5).astype(np.float32) / 127.5)
        nz = mod.tensor(rng.standard_normal((3, 2, 2, 2)).astype(np.float32))
        model = lambda x, ts: mod.tanh(x * 0.7 + ts.float().view(-1, 1, 1, 1) * 0.05)
        tt = mod.tensor([0, 4, 9])
        res = (g.training_losses(model, x0, tt, noise=nz)["loss"].numpy(),
               g.ddim_sample(model, g.q_sample(x0, tt, noise=nz), tt, eta=0.0)["sample"].numpy(),
               g._prior_bpd(x0).numpy())
        if mod is lucid:
            ours = res
    for u, v in zip(ours, res):  # the t = 0 decoder NLL differences two float32 CDFs: 1e-4
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-6)


# ======================================================================== diffusers Euler / DPM-Solver
def deprecate(*args, **kwargs):  # diffusers.utils.deprecate: only warns here
    pass


def k_schedulers_page(torch):
    """scheduling_euler_discrete.py (its early version) and scheduling_dpmsolver_multistep.py, on ``torch``."""
    d = diffusers_page(torch)
    betas_for_alpha_bar, rescale_zero_terminal_snr = d.betas_for_alpha_bar, d.rescale_zero_terminal_snr

    def randn_tensor(shape, generator=None, device=None, dtype=None):
        if callable(generator):
            return torch.tensor(generator(tuple(shape)), dtype=dtype, device=device)
        return torch.randn(shape, generator=generator, device=device, dtype=dtype)

    class EulerDiscreteScheduler:
        @register_to_config
        def __init__(
            self,
            num_train_timesteps=1000,
            beta_start=0.0001,
            beta_end=0.02,
            beta_schedule="linear",
            trained_betas=None,
        ):
            if trained_betas is not None:
                self.betas = torch.from_numpy(trained_betas)
            elif beta_schedule == "linear":
                self.betas = torch.linspace(beta_start, beta_end, num_train_timesteps, dtype=torch.float32)
            elif beta_schedule == "scaled_linear":
                # this schedule is very specific to the latent diffusion model.
                self.betas = (
                    torch.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=torch.float32) ** 2
                )
            else:
                raise NotImplementedError(f"{beta_schedule} does is not implemented for {self.__class__}")

            self.alphas = 1.0 - self.betas
            self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)

            sigmas = np.array(((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5)
            sigmas = np.concatenate([sigmas[::-1], [0.0]]).astype(np.float32)
            self.sigmas = torch.from_numpy(sigmas)

            # standard deviation of the initial noise distribution
            self.init_noise_sigma = self.sigmas.max()

            # setable values
            self.num_inference_steps = None
            timesteps = np.linspace(0, num_train_timesteps - 1, num_train_timesteps, dtype=float)[::-1].copy()
            self.timesteps = torch.from_numpy(timesteps)
            self.derivatives = []
            self.is_scale_input_called = False

        def scale_model_input(self, sample, timestep):
            if isinstance(timestep, torch.Tensor):
                timestep = timestep.to(self.timesteps.device)
            step_index = (self.timesteps == timestep).nonzero().item()
            sigma = self.sigmas[step_index]
            sample = sample / ((sigma**2 + 1) ** 0.5)
            self.is_scale_input_called = True
            return sample

        def set_timesteps(self, num_inference_steps, device=None):
            self.num_inference_steps = num_inference_steps

            timesteps = np.linspace(0, self.config.num_train_timesteps - 1, num_inference_steps, dtype=float)[::-1].copy()
            sigmas = np.array(((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5)
            sigmas = np.interp(timesteps, np.arange(0, len(sigmas)), sigmas)
            sigmas = np.concatenate([sigmas, [0.0]]).astype(np.float32)
            self.sigmas = torch.from_numpy(sigmas).to(device=device)
            self.timesteps = torch.from_numpy(timesteps).to(device=device)

            self.derivatives = []

        def step(
            self,
            model_output,
            timestep,
            sample,
            order=4,
            s_churn=0.0,
            s_tmin=0.0,
            s_tmax=float("inf"),
            s_noise=1.0,
            return_dict=True,
        ):
            if isinstance(timestep, torch.Tensor):
                timestep = timestep.to(self.timesteps.device)
            if (
                isinstance(timestep, int)
                or isinstance(timestep, torch.IntTensor)
                or isinstance(timestep, torch.LongTensor)
            ):
                deprecate("timestep as an index", "0.8.0", "", standard_warn=False)
                step_index = timestep
            else:
                step_index = (self.timesteps == timestep).nonzero().item()
            sigma = self.sigmas[step_index]
            gamma = min(s_churn / (len(self.sigmas) - 1), 2**0.5 - 1) if s_tmin <= sigma <= s_tmax else 0.0
            eps = torch.randn_like(sample) * s_noise
            sigma_hat = sigma * (gamma + 1)
            if gamma > 0:
                sample = sample + eps * (sigma_hat**2 - sigma**2) ** 0.5
            # 1. compute predicted original sample (x_0) from sigma-scaled predicted noise
            pred_original_sample = sample - sigma_hat * model_output

            # 2. Convert to an ODE derivative
            derivative = (sample - pred_original_sample) / sigma_hat
            self.derivatives.append(derivative)
            if len(self.derivatives) > order:
                self.derivatives.pop(0)

            dt = self.sigmas[step_index + 1] - sigma_hat

            prev_sample = sample + derivative * dt

            if not return_dict:
                return (prev_sample,)

            return SimpleNamespace(prev_sample=prev_sample, pred_original_sample=pred_original_sample)

        def add_noise(self, original_samples, noise, timesteps):
            # Make sure sigmas and timesteps have the same device and dtype as original_samples
            self.sigmas = self.sigmas.to(device=original_samples.device, dtype=original_samples.dtype)
            self.timesteps = self.timesteps.to(original_samples.device)
            timesteps = timesteps.to(original_samples.device)

            schedule_timesteps = self.timesteps

            if isinstance(timesteps, torch.IntTensor) or isinstance(timesteps, torch.LongTensor):
                deprecate("timesteps as indices", "0.8.0", "", standard_warn=False)
                step_indices = timesteps
            else:
                step_indices = [(schedule_timesteps == t).nonzero().item() for t in timesteps]

            sigma = self.sigmas[step_indices].flatten()
            while len(sigma.shape) < len(original_samples.shape):
                sigma = sigma.unsqueeze(-1)

            noisy_samples = original_samples + noise * sigma
            return noisy_samples

    class DPMSolverMultistepScheduler:
        order = 1

        @register_to_config
        def __init__(
            self,
            num_train_timesteps=1000,
            beta_start=0.0001,
            beta_end=0.02,
            beta_schedule="linear",
            trained_betas=None,
            solver_order=2,
            prediction_type="epsilon",
            thresholding=False,
            dynamic_thresholding_ratio=0.995,
            sample_max_value=1.0,
            algorithm_type="dpmsolver++",
            solver_type="midpoint",
            lower_order_final=True,
            euler_at_final=False,
            use_karras_sigmas=False,
            use_lu_lambdas=False,
            final_sigmas_type="zero",  # "zero", "sigma_min"
            lambda_min_clipped=-float("inf"),
            variance_type=None,
            timestep_spacing="linspace",
            steps_offset=0,
            rescale_betas_zero_snr=False,
        ):
            if trained_betas is not None:
                self.betas = torch.tensor(trained_betas, dtype=torch.float32)
            elif beta_schedule == "linear":
                self.betas = torch.linspace(beta_start, beta_end, num_train_timesteps, dtype=torch.float32)
            elif beta_schedule == "scaled_linear":
                # this schedule is very specific to the latent diffusion model.
                self.betas = torch.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=torch.float32) ** 2
            elif beta_schedule == "squaredcos_cap_v2":
                # Glide cosine schedule
                self.betas = betas_for_alpha_bar(num_train_timesteps)
            else:
                raise NotImplementedError(f"{beta_schedule} does is not implemented for {self.__class__}")

            if rescale_betas_zero_snr:
                self.betas = rescale_zero_terminal_snr(self.betas)

            self.alphas = 1.0 - self.betas
            self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)

            if rescale_betas_zero_snr:
                # Close to 0 without being 0 so first sigma is not inf
                # FP16 smallest positive subnormal works well here
                self.alphas_cumprod[-1] = 2**-24

            # Currently we only support VP-type noise schedule
            self.alpha_t = torch.sqrt(self.alphas_cumprod)
            self.sigma_t = torch.sqrt(1 - self.alphas_cumprod)
            self.lambda_t = torch.log(self.alpha_t) - torch.log(self.sigma_t)
            self.sigmas = ((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5

            # standard deviation of the initial noise distribution
            self.init_noise_sigma = 1.0

            # settings for DPM-Solver
            if algorithm_type not in ["dpmsolver", "dpmsolver++", "sde-dpmsolver", "sde-dpmsolver++"]:
                raise NotImplementedError(f"{algorithm_type} does is not implemented for {self.__class__}")

            if solver_type not in ["midpoint", "heun"]:
                raise NotImplementedError(f"{solver_type} does is not implemented for {self.__class__}")

            if algorithm_type not in ["dpmsolver++", "sde-dpmsolver++"] and final_sigmas_type == "zero":
                raise ValueError(
                    f"`final_sigmas_type` {final_sigmas_type} is not supported for `algorithm_type` {algorithm_type}. Please choose `sigma_min` instead."
                )

            # setable values
            self.num_inference_steps = None
            timesteps = np.linspace(0, num_train_timesteps - 1, num_train_timesteps, dtype=np.float32)[::-1].copy()
            self.timesteps = torch.from_numpy(timesteps)
            self.model_outputs = [None] * solver_order
            self.lower_order_nums = 0
            self._step_index = None
            self._begin_index = None
            self.sigmas = self.sigmas.to("cpu")  # to avoid too much CPU/GPU communication

        @property
        def step_index(self):
            return self._step_index

        @property
        def begin_index(self):
            return self._begin_index

        def set_begin_index(self, begin_index=0):
            self._begin_index = begin_index

        def set_timesteps(self, num_inference_steps=None, device=None, timesteps=None):
            if num_inference_steps is None and timesteps is None:
                raise ValueError("Must pass exactly one of `num_inference_steps` or `custom_timesteps`.")
            if num_inference_steps is not None and timesteps is not None:
                raise ValueError("Can only pass one of `num_inference_steps` or `custom_timesteps`.")
            if timesteps is not None and self.config.use_karras_sigmas:
                raise ValueError("Cannot use `timesteps` with `config.use_karras_sigmas = True`")
            if timesteps is not None and self.config.use_lu_lambdas:
                raise ValueError("Cannot use `timesteps` with `config.use_lu_lambdas = True`")

            if timesteps is not None:
                timesteps = np.array(timesteps).astype(np.int64)
            else:
                # Clipping the minimum of all lambda(t) for numerical stability.
                # This is critical for cosine (squaredcos_cap_v2) noise schedule.
                clipped_idx = torch.searchsorted(torch.flip(self.lambda_t, [0]), self.config.lambda_min_clipped)
                last_timestep = ((self.config.num_train_timesteps - clipped_idx).numpy()).item()

                # "linspace", "leading", "trailing" corresponds to annotation of Table 2. of https://arxiv.org/abs/2305.08891
                if self.config.timestep_spacing == "linspace":
                    timesteps = (
                        np.linspace(0, last_timestep - 1, num_inference_steps + 1)
                        .round()[::-1][:-1]
                        .copy()
                        .astype(np.int64)
                    )
                elif self.config.timestep_spacing == "leading":
                    step_ratio = last_timestep // (num_inference_steps + 1)
                    # creates integer timesteps by multiplying by ratio
                    # casting to int to avoid issues when num_inference_step is power of 3
                    timesteps = (
                        (np.arange(0, num_inference_steps + 1) * step_ratio).round()[::-1][:-1].copy().astype(np.int64)
                    )
                    timesteps += self.config.steps_offset
                elif self.config.timestep_spacing == "trailing":
                    step_ratio = self.config.num_train_timesteps / num_inference_steps
                    # creates integer timesteps by multiplying by ratio
                    # casting to int to avoid issues when num_inference_step is power of 3
                    timesteps = np.arange(last_timestep, 0, -step_ratio).round().copy().astype(np.int64)
                    timesteps -= 1
                else:
                    raise ValueError(
                        f"{self.config.timestep_spacing} is not supported. Please make sure to choose one of 'linspace', 'leading' or 'trailing'."
                    )

            sigmas = np.array(((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5)
            log_sigmas = np.log(sigmas)

            if self.config.use_karras_sigmas:
                sigmas = np.flip(sigmas).copy()
                sigmas = self._convert_to_karras(in_sigmas=sigmas, num_inference_steps=num_inference_steps)
                timesteps = np.array([self._sigma_to_t(sigma, log_sigmas) for sigma in sigmas]).round()
            elif self.config.use_lu_lambdas:
                lambdas = np.flip(log_sigmas.copy())
                lambdas = self._convert_to_lu(in_lambdas=lambdas, num_inference_steps=num_inference_steps)
                sigmas = np.exp(lambdas)
                timesteps = np.array([self._sigma_to_t(sigma, log_sigmas) for sigma in sigmas]).round()
            else:
                sigmas = np.interp(timesteps, np.arange(0, len(sigmas)), sigmas)

            if self.config.final_sigmas_type == "sigma_min":
                sigma_last = ((1 - self.alphas_cumprod[0]) / self.alphas_cumprod[0]) ** 0.5
            elif self.config.final_sigmas_type == "zero":
                sigma_last = 0
            else:
                raise ValueError(
                    f"`final_sigmas_type` must be one of 'zero', or 'sigma_min', but got {self.config.final_sigmas_type}"
                )

            sigmas = np.concatenate([sigmas, [sigma_last]]).astype(np.float32)

            self.sigmas = torch.from_numpy(sigmas)
            self.timesteps = torch.from_numpy(timesteps).to(device=device, dtype=torch.int64)

            self.num_inference_steps = len(timesteps)

            self.model_outputs = [
                None,
            ] * self.config.solver_order
            self.lower_order_nums = 0

            # add an index counter for schedulers that allow duplicated timesteps
            self._step_index = None
            self._begin_index = None
            self.sigmas = self.sigmas.to("cpu")  # to avoid too much CPU/GPU communication

        def _sigma_to_t(self, sigma, log_sigmas):
            # get log sigma
            log_sigma = np.log(np.maximum(sigma, 1e-10))

            # get distribution
            dists = log_sigma - log_sigmas[:, np.newaxis]

            # get sigmas range
            low_idx = np.cumsum((dists >= 0), axis=0).argmax(axis=0).clip(max=log_sigmas.shape[0] - 2)
            high_idx = low_idx + 1

            low = log_sigmas[low_idx]
            high = log_sigmas[high_idx]

            # interpolate sigmas
            w = (low - log_sigma) / (low - high)
            w = np.clip(w, 0, 1)

            # transform interpolation to time range
            t = (1 - w) * low_idx + w * high_idx
            t = t.reshape(sigma.shape)
            return t

        def _sigma_to_alpha_sigma_t(self, sigma):
            alpha_t = 1 / ((sigma**2 + 1) ** 0.5)
            sigma_t = sigma * alpha_t

            return alpha_t, sigma_t

        def _convert_to_karras(self, in_sigmas, num_inference_steps):
            """Constructs the noise schedule of Karras et al. (2022)."""

            # Hack to make sure that other schedulers which copy this function don't break
            # TODO: Add this logic to the other schedulers
            if hasattr(self.config, "sigma_min"):
                sigma_min = self.config.sigma_min
            else:
                sigma_min = None

            if hasattr(self.config, "sigma_max"):
                sigma_max = self.config.sigma_max
            else:
                sigma_max = None

            sigma_min = sigma_min if sigma_min is not None else in_sigmas[-1].item()
            sigma_max = sigma_max if sigma_max is not None else in_sigmas[0].item()

            rho = 7.0  # 7.0 is the value used in the paper
            ramp = np.linspace(0, 1, num_inference_steps)
            min_inv_rho = sigma_min ** (1 / rho)
            max_inv_rho = sigma_max ** (1 / rho)
            sigmas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
            return sigmas

        def _convert_to_lu(self, in_lambdas, num_inference_steps):
            """Constructs the noise schedule of Lu et al. (2022)."""

            lambda_min: float = in_lambdas[-1].item()
            lambda_max: float = in_lambdas[0].item()

            rho = 1.0  # 1.0 is the value used in the paper
            ramp = np.linspace(0, 1, num_inference_steps)
            min_inv_rho = lambda_min ** (1 / rho)
            max_inv_rho = lambda_max ** (1 / rho)
            lambdas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
            return lambdas

        def convert_model_output(self, model_output, *args, sample=None, **kwargs):
            if sample is None:
                if len(args) > 1:
                    sample = args[1]
                else:
                    raise ValueError("missing `sample` as a required keyward argument")

            # DPM-Solver++ needs to solve an integral of the data prediction model.
            if self.config.algorithm_type in ["dpmsolver++", "sde-dpmsolver++"]:
                if self.config.prediction_type == "epsilon":
                    # DPM-Solver and DPM-Solver++ only need the "mean" output.
                    if self.config.variance_type in ["learned", "learned_range"]:
                        model_output = model_output[:, :3]
                    sigma = self.sigmas[self.step_index]
                    alpha_t, sigma_t = self._sigma_to_alpha_sigma_t(sigma)
                    x0_pred = (sample - sigma_t * model_output) / alpha_t
                elif self.config.prediction_type == "sample":
                    x0_pred = model_output
                elif self.config.prediction_type == "v_prediction":
                    sigma = self.sigmas[self.step_index]
                    alpha_t, sigma_t = self._sigma_to_alpha_sigma_t(sigma)
                    x0_pred = alpha_t * sample - sigma_t * model_output
                else:
                    raise ValueError(
                        f"prediction_type given as {self.config.prediction_type} must be one of `epsilon`, `sample`, or"
                        " `v_prediction` for the DPMSolverMultistepScheduler."
                    )

                if self.config.thresholding:
                    x0_pred = d.DDPMParallelScheduler._threshold_sample(self, x0_pred)

                return x0_pred

            # DPM-Solver needs to solve an integral of the noise prediction model.
            elif self.config.algorithm_type in ["dpmsolver", "sde-dpmsolver"]:
                if self.config.prediction_type == "epsilon":
                    # DPM-Solver and DPM-Solver++ only need the "mean" output.
                    if self.config.variance_type in ["learned", "learned_range"]:
                        epsilon = model_output[:, :3]
                    else:
                        epsilon = model_output
                elif self.config.prediction_type == "sample":
                    sigma = self.sigmas[self.step_index]
                    alpha_t, sigma_t = self._sigma_to_alpha_sigma_t(sigma)
                    epsilon = (sample - alpha_t * model_output) / sigma_t
                elif self.config.prediction_type == "v_prediction":
                    sigma = self.sigmas[self.step_index]
                    alpha_t, sigma_t = self._sigma_to_alpha_sigma_t(sigma)
                    epsilon = alpha_t * model_output + sigma_t * sample
                else:
                    raise ValueError(
                        f"prediction_type given as {self.config.prediction_type} must be one of `epsilon`, `sample`, or"
                        " `v_prediction` for the DPMSolverMultistepScheduler."
                    )

                return epsilon

        def dpm_solver_first_order_update(self, model_output, *args, sample=None, noise=None, **kwargs):
            sigma_t, sigma_s = self.sigmas[self.step_index + 1], self.sigmas[self.step_index]
            alpha_t, sigma_t = self._sigma_to_alpha_sigma_t(sigma_t)
            alpha_s, sigma_s = self._sigma_to_alpha_sigma_t(sigma_s)
            lambda_t = torch.log(alpha_t) - torch.log(sigma_t)
            lambda_s = torch.log(alpha_s) - torch.log(sigma_s)

            h = lambda_t - lambda_s
            if self.config.algorithm_type == "dpmsolver++":
                x_t = (sigma_t / sigma_s) * sample - (alpha_t * (torch.exp(-h) - 1.0)) * model_output
            elif self.config.algorithm_type == "dpmsolver":
                x_t = (alpha_t / alpha_s) * sample - (sigma_t * (torch.exp(h) - 1.0)) * model_output
            elif self.config.algorithm_type == "sde-dpmsolver++":
                assert noise is not None
                x_t = (
                    (sigma_t / sigma_s * torch.exp(-h)) * sample
                    + (alpha_t * (1 - torch.exp(-2.0 * h))) * model_output
                    + sigma_t * torch.sqrt(1.0 - torch.exp(-2 * h)) * noise
                )
            elif self.config.algorithm_type == "sde-dpmsolver":
                assert noise is not None
                x_t = (
                    (alpha_t / alpha_s) * sample
                    - 2.0 * (sigma_t * (torch.exp(h) - 1.0)) * model_output
                    + sigma_t * torch.sqrt(torch.exp(2 * h) - 1.0) * noise
                )
            return x_t

        def multistep_dpm_solver_second_order_update(self, model_output_list, *args, sample=None, noise=None, **kwargs):
            sigma_t, sigma_s0, sigma_s1 = (
                self.sigmas[self.step_index + 1],
                self.sigmas[self.step_index],
                self.sigmas[self.step_index - 1],
            )

            alpha_t, sigma_t = self._sigma_to_alpha_sigma_t(sigma_t)
            alpha_s0, sigma_s0 = self._sigma_to_alpha_sigma_t(sigma_s0)
            alpha_s1, sigma_s1 = self._sigma_to_alpha_sigma_t(sigma_s1)

            lambda_t = torch.log(alpha_t) - torch.log(sigma_t)
            lambda_s0 = torch.log(alpha_s0) - torch.log(sigma_s0)
            lambda_s1 = torch.log(alpha_s1) - torch.log(sigma_s1)

            m0, m1 = model_output_list[-1], model_output_list[-2]

            h, h_0 = lambda_t - lambda_s0, lambda_s0 - lambda_s1
            r0 = h_0 / h
            D0, D1 = m0, (1.0 / r0) * (m0 - m1)
            if self.config.algorithm_type == "dpmsolver++":
                # See https://arxiv.org/abs/2211.01095 for detailed derivations
                if self.config.solver_type == "midpoint":
                    x_t = (
                        (sigma_t / sigma_s0) * sample
                        - (alpha_t * (torch.exp(-h) - 1.0)) * D0
                        - 0.5 * (alpha_t * (torch.exp(-h) - 1.0)) * D1
                    )
                elif self.config.solver_type == "heun":
                    x_t = (
                        (sigma_t / sigma_s0) * sample
                        - (alpha_t * (torch.exp(-h) - 1.0)) * D0
                        + (alpha_t * ((torch.exp(-h) - 1.0) / h + 1.0)) * D1
                    )
            elif self.config.algorithm_type == "dpmsolver":
                # See https://arxiv.org/abs/2206.00927 for detailed derivations
                if self.config.solver_type == "midpoint":
                    x_t = (
                        (alpha_t / alpha_s0) * sample
                        - (sigma_t * (torch.exp(h) - 1.0)) * D0
                        - 0.5 * (sigma_t * (torch.exp(h) - 1.0)) * D1
                    )
                elif self.config.solver_type == "heun":
                    x_t = (
                        (alpha_t / alpha_s0) * sample
                        - (sigma_t * (torch.exp(h) - 1.0)) * D0
                        - (sigma_t * ((torch.exp(h) - 1.0) / h - 1.0)) * D1
                    )
            elif self.config.algorithm_type == "sde-dpmsolver++":
                assert noise is not None
                if self.config.solver_type == "midpoint":
                    x_t = (
                        (sigma_t / sigma_s0 * torch.exp(-h)) * sample
                        + (alpha_t * (1 - torch.exp(-2.0 * h))) * D0
                        + 0.5 * (alpha_t * (1 - torch.exp(-2.0 * h))) * D1
                        + sigma_t * torch.sqrt(1.0 - torch.exp(-2 * h)) * noise
                    )
                elif self.config.solver_type == "heun":
                    x_t = (
                        (sigma_t / sigma_s0 * torch.exp(-h)) * sample
                        + (alpha_t * (1 - torch.exp(-2.0 * h))) * D0
                        + (alpha_t * ((1.0 - torch.exp(-2.0 * h)) / (-2.0 * h) + 1.0)) * D1
                        + sigma_t * torch.sqrt(1.0 - torch.exp(-2 * h)) * noise
                    )
            return x_t

        def multistep_dpm_solver_third_order_update(self, model_output_list, *args, sample=None, **kwargs):
            sigma_t, sigma_s0, sigma_s1, sigma_s2 = (
                self.sigmas[self.step_index + 1],
                self.sigmas[self.step_index],
                self.sigmas[self.step_index - 1],
                self.sigmas[self.step_index - 2],
            )

            alpha_t, sigma_t = self._sigma_to_alpha_sigma_t(sigma_t)
            alpha_s0, sigma_s0 = self._sigma_to_alpha_sigma_t(sigma_s0)
            alpha_s1, sigma_s1 = self._sigma_to_alpha_sigma_t(sigma_s1)
            alpha_s2, sigma_s2 = self._sigma_to_alpha_sigma_t(sigma_s2)

            lambda_t = torch.log(alpha_t) - torch.log(sigma_t)
            lambda_s0 = torch.log(alpha_s0) - torch.log(sigma_s0)
            lambda_s1 = torch.log(alpha_s1) - torch.log(sigma_s1)
            lambda_s2 = torch.log(alpha_s2) - torch.log(sigma_s2)

            m0, m1, m2 = model_output_list[-1], model_output_list[-2], model_output_list[-3]

            h, h_0, h_1 = lambda_t - lambda_s0, lambda_s0 - lambda_s1, lambda_s1 - lambda_s2
            r0, r1 = h_0 / h, h_1 / h
            D0 = m0
            D1_0, D1_1 = (1.0 / r0) * (m0 - m1), (1.0 / r1) * (m1 - m2)
            D1 = D1_0 + (r0 / (r0 + r1)) * (D1_0 - D1_1)
            D2 = (1.0 / (r0 + r1)) * (D1_0 - D1_1)
            if self.config.algorithm_type == "dpmsolver++":
                # See https://arxiv.org/abs/2206.00927 for detailed derivations
                x_t = (
                    (sigma_t / sigma_s0) * sample
                    - (alpha_t * (torch.exp(-h) - 1.0)) * D0
                    + (alpha_t * ((torch.exp(-h) - 1.0) / h + 1.0)) * D1
                    - (alpha_t * ((torch.exp(-h) - 1.0 + h) / h**2 - 0.5)) * D2
                )
            elif self.config.algorithm_type == "dpmsolver":
                # See https://arxiv.org/abs/2206.00927 for detailed derivations
                x_t = (
                    (alpha_t / alpha_s0) * sample
                    - (sigma_t * (torch.exp(h) - 1.0)) * D0
                    - (sigma_t * ((torch.exp(h) - 1.0) / h - 1.0)) * D1
                    - (sigma_t * ((torch.exp(h) - 1.0 - h) / h**2 - 0.5)) * D2
                )
            return x_t

        def index_for_timestep(self, timestep, schedule_timesteps=None):
            if schedule_timesteps is None:
                schedule_timesteps = self.timesteps

            index_candidates = (schedule_timesteps == timestep).nonzero()

            if len(index_candidates) == 0:
                step_index = len(self.timesteps) - 1
            # The sigma index that is taken for the **very** first `step`
            # is always the second index (or the last index if there is only 1)
            # This way we can ensure we don't accidentally skip a sigma in
            # case we start in the middle of the denoising schedule (e.g. for image-to-image)
            elif len(index_candidates) > 1:
                step_index = index_candidates[1].item()
            else:
                step_index = index_candidates[0].item()

            return step_index

        def _init_step_index(self, timestep):
            if self.begin_index is None:
                if isinstance(timestep, torch.Tensor):
                    timestep = timestep.to(self.timesteps.device)
                self._step_index = self.index_for_timestep(timestep)
            else:
                self._step_index = self._begin_index

        def step(self, model_output, timestep, sample, generator=None, variance_noise=None, return_dict=True):
            if self.num_inference_steps is None:
                raise ValueError(
                    "Number of inference steps is 'None', you need to run 'set_timesteps' after creating the scheduler"
                )

            if self.step_index is None:
                self._init_step_index(timestep)

            # Improve numerical stability for small number of steps
            lower_order_final = (self.step_index == len(self.timesteps) - 1) and (
                self.config.euler_at_final
                or (self.config.lower_order_final and len(self.timesteps) < 15)
                or self.config.final_sigmas_type == "zero"
            )
            lower_order_second = (
                (self.step_index == len(self.timesteps) - 2) and self.config.lower_order_final and len(self.timesteps) < 15
            )

            model_output = self.convert_model_output(model_output, sample=sample)
            for i in range(self.config.solver_order - 1):
                self.model_outputs[i] = self.model_outputs[i + 1]
            self.model_outputs[-1] = model_output

            # Upcast to avoid precision issues when computing prev_sample
            sample = sample.to(torch.float32)
            if self.config.algorithm_type in ["sde-dpmsolver", "sde-dpmsolver++"] and variance_noise is None:
                noise = randn_tensor(
                    model_output.shape, generator=generator, device=model_output.device, dtype=torch.float32
                )
            elif self.config.algorithm_type in ["sde-dpmsolver", "sde-dpmsolver++"]:
                noise = variance_noise.to(device=model_output.device, dtype=torch.float32)
            else:
                noise = None

            if self.config.solver_order == 1 or self.lower_order_nums < 1 or lower_order_final:
                prev_sample = self.dpm_solver_first_order_update(model_output, sample=sample, noise=noise)
            elif self.config.solver_order == 2 or self.lower_order_nums < 2 or lower_order_second:
                prev_sample = self.multistep_dpm_solver_second_order_update(self.model_outputs, sample=sample, noise=noise)
            else:
                prev_sample = self.multistep_dpm_solver_third_order_update(self.model_outputs, sample=sample)

            if self.lower_order_nums < self.config.solver_order:
                self.lower_order_nums += 1

            # Cast sample back to expected dtype
            prev_sample = prev_sample.to(model_output.dtype)

            # upon completion increase step index by one
            self._step_index += 1

            if not return_dict:
                return (prev_sample,)

            return SimpleNamespace(prev_sample=prev_sample)

        def scale_model_input(self, sample, *args, **kwargs):
            return sample

        def add_noise(self, original_samples, noise, timesteps):
            # Make sure sigmas and timesteps have the same device and dtype as original_samples
            sigmas = self.sigmas.to(device=original_samples.device, dtype=original_samples.dtype)
            schedule_timesteps = self.timesteps.to(original_samples.device)
            timesteps = timesteps.to(original_samples.device)

            # begin_index is None when the scheduler is used for training or pipeline does not implement set_begin_index
            if self.begin_index is None:
                step_indices = [self.index_for_timestep(t, schedule_timesteps) for t in timesteps]
            elif self.step_index is not None:
                # add_noise is called after first denoising step (for inpainting)
                step_indices = [self.step_index] * timesteps.shape[0]
            else:
                # add noise is called before first denoising step to create initial latent(img2img)
                step_indices = [self.begin_index] * timesteps.shape[0]

            sigma = sigmas[step_indices].flatten()
            while len(sigma.shape) < len(original_samples.shape):
                sigma = sigma.unsqueeze(-1)

            alpha_t, sigma_t = self._sigma_to_alpha_sigma_t(sigma)
            noisy_samples = alpha_t * original_samples + sigma_t * noise
            return noisy_samples

        def __len__(self):
            return self.config.num_train_timesteps

    return SimpleNamespace(EulerDiscreteScheduler=EulerDiscreteScheduler,
                           DPMSolverMultistepScheduler=DPMSolverMultistepScheduler)


def test_euler_discrete_sigmas_and_true_x0_path_is_exact():
    k = k_schedulers_page(lucid)
    T = 30
    s = k.EulerDiscreteScheduler(num_train_timesteps=T, beta_start=0.01, beta_end=0.3)
    ac = np.cumprod(1 - np.linspace(0.01, 0.3, T, dtype=np.float32).astype(np.float64))
    sig = np.sqrt((1 - ac) / ac)
    np.testing.assert_allclose(_np(s.sigmas), np.append(sig[::-1], 0), rtol=1e-5)
    assert abs(float(s.init_noise_sigma) - sig[-1]) < 1e-4 * sig[-1]
    s.set_timesteps(5)
    ts = np.linspace(0, T - 1, 5)[::-1]
    np.testing.assert_allclose(_np(s.timesteps), ts)
    np.testing.assert_allclose(_np(s.sigmas), np.append(np.interp(ts, np.arange(T), sig), 0), rtol=1e-5)
    rng = np.random.default_rng(20)
    x0 = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    eps = rng.standard_normal((2, 3)).astype(np.float32)
    # add_noise with the schedule's float timesteps: x0 + sigma * noise
    tsel = s.timesteps[[1, 3]]
    noisy = s.add_noise(lucid.tensor(x0), lucid.tensor(eps), tsel)
    sg = np.interp(ts, np.arange(T), sig)
    np.testing.assert_allclose(_np(noisy), x0 + eps * sg[[1, 3]][:, None], rtol=1e-5)
    # with the true x0 (model output eps of x = x0 + sigma eps) the probability-flow ODE is linear in sigma:
    # Euler is exact and every step lands on x0 + sigma_next * eps, the last on x0
    sample = lucid.tensor(x0 + sg[0] * eps)
    for i, t in enumerate(s.timesteps):
        scaled = s.scale_model_input(sample, t)
        np.testing.assert_allclose(_np(scaled), _np(sample) / math.sqrt(sg[i] ** 2 + 1), rtol=1e-5)
        model_output = (sample - lucid.tensor(x0)) / float(s.sigmas[i])
        out = s.step(model_output, t, sample)
        np.testing.assert_allclose(_np(out.pred_original_sample), x0, atol=1e-5)
        sample = out.prev_sample
        nxt = sg[i + 1] if i + 1 < 5 else 0.0
        np.testing.assert_allclose(_np(sample), x0 + nxt * eps, atol=1e-5)
    assert len(s.derivatives) == 4  # ``order`` bounds the stored derivatives
    # an integer index is taken as the step index; churn outside [s_tmin, s_tmax] leaves the step deterministic
    s.set_timesteps(5)
    a = s.step(lucid.tensor(eps), 2, lucid.tensor(x0), s_churn=5.0, s_tmin=100.0).prev_sample
    np.testing.assert_allclose(_np(a), x0 + eps * (sg[3] - sg[2]), atol=1e-5)


def _dpm_numpy(sig, eps_fn, x, order, algo="dpmsolver++", solver="midpoint"):
    """DPM-Solver(++) multistep re-derived in NumPy (float64), lower order on the first and last steps."""
    al = 1 / np.sqrt(sig**2 + 1)
    st = sig * al
    lam = np.log(al) - np.log(np.where(st > 0, st, np.nan))
    n = len(sig) - 1
    ms = []
    for i in range(n):
        e = eps_fn(x, i)
        m = (x - st[i] * e) / al[i] if algo == "dpmsolver++" else e
        ms.append(m)
        h = (lam[i + 1] if st[i + 1] > 0 else np.inf) - lam[i]
        last = i == n - 1
        k = 1 if (i == 0 or last) else (2 if (order == 2 or i == 1 or (i == n - 2 and n < 15)) else 3)
        if algo == "dpmsolver++":
            em = np.exp(-h) - 1.0
            if k == 1:
                x = (st[i + 1] / st[i]) * x - al[i + 1] * em * m
            elif k == 2:
                r0 = (lam[i] - lam[i - 1]) / h
                D1 = (m - ms[-2]) / r0
                if solver == "midpoint":
                    x = (st[i + 1] / st[i]) * x - al[i + 1] * em * m - 0.5 * al[i + 1] * em * D1
                else:
                    x = (st[i + 1] / st[i]) * x - al[i + 1] * em * m + al[i + 1] * (em / h + 1.0) * D1
            else:
                r0, r1 = (lam[i] - lam[i - 1]) / h, (lam[i - 1] - lam[i - 2]) / h
                D10, D11 = (m - ms[-2]) / r0, (ms[-2] - ms[-3]) / r1
                D1 = D10 + r0 / (r0 + r1) * (D10 - D11)
                D2 = (D10 - D11) / (r0 + r1)
                x = ((st[i + 1] / st[i]) * x - al[i + 1] * em * m + al[i + 1] * (em / h + 1.0) * D1
                     - al[i + 1] * ((em + h) / h**2 - 0.5) * D2)
        else:  # dpmsolver, first/second order
            ep = np.exp(h) - 1.0
            if k == 1:
                x = (al[i + 1] / al[i]) * x - st[i + 1] * ep * m
            else:
                r0 = (lam[i] - lam[i - 1]) / h
                D1 = (m - ms[-2]) / r0
                x = (al[i + 1] / al[i]) * x - st[i + 1] * ep * m - 0.5 * st[i + 1] * ep * D1
    return x


@pytest.mark.parametrize("order,algo,solver", [(2, "dpmsolver++", "midpoint"), (2, "dpmsolver++", "heun"),
                                               (3, "dpmsolver++", "midpoint"), (2, "dpmsolver", "midpoint")])
def test_dpmsolver_multistep_against_numpy(order, algo, solver):
    k = k_schedulers_page(lucid)
    T = 40
    kw = dict(num_train_timesteps=T, beta_start=0.005, beta_end=0.2, solver_order=order, algorithm_type=algo,
              solver_type=solver)
    if algo == "dpmsolver":
        kw["final_sigmas_type"] = "sigma_min"
    s = k.DPMSolverMultistepScheduler(**kw)
    s.set_timesteps(6)
    ac = np.cumprod(1 - np.linspace(0.005, 0.2, T, dtype=np.float32).astype(np.float64))
    ts = np.linspace(0, T - 1, 7).round()[::-1][:-1].astype(np.int64)
    assert s.timesteps.tolist() == ts.tolist()
    sig = np.sqrt((1 - ac) / ac)
    last = 0.0 if algo == "dpmsolver++" else sig[0]
    sg = np.append(np.interp(ts, np.arange(T), sig), last)
    np.testing.assert_allclose(_np(s.sigmas), sg, rtol=1e-5)
    rng = np.random.default_rng(21)
    A = rng.uniform(-0.3, 0.3, (3, 3))
    eps_fn = lambda x, i: np.tanh(x @ A + 0.1 * i)
    x = rng.standard_normal((2, 3))
    sample = lucid.tensor(x.astype(np.float32))
    for i, t in enumerate(s.timesteps):
        e = lucid.tensor(eps_fn(_np(sample), i).astype(np.float32))
        sample = s.step(e, t, sample).prev_sample
    want = _dpm_numpy(sg.astype(np.float32).astype(np.float64), lambda xx, i: eps_fn(xx, i), x, order, algo, solver)
    np.testing.assert_allclose(_np(sample), want, rtol=2e-4, atol=2e-4)


def test_dpmsolver_true_x0_recovery_karras_sigmas_lambda_clip_and_add_noise():
    k = k_schedulers_page(lucid)
    T = 50
    # DPM-Solver++ integrates the data prediction exactly when it is constant: the true x0 is recovered
    s = k.DPMSolverMultistepScheduler(num_train_timesteps=T, beta_start=0.005, beta_end=0.2, solver_order=3,
                                      prediction_type="sample")
    s.set_timesteps(8)
    rng = np.random.default_rng(22)
    x0 = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    eps = rng.standard_normal((2, 3)).astype(np.float32)
    sample = s.add_noise(lucid.tensor(x0), lucid.tensor(eps), s.timesteps[:1])
    sg0 = float(s.sigmas[0])
    np.testing.assert_allclose(_np(sample), (x0 + sg0 * eps) / math.sqrt(1 + sg0**2), rtol=1e-5)
    for i, t in enumerate(s.timesteps):
        sample = s.step(lucid.tensor(x0), t, sample).prev_sample
        sg = float(s.sigmas[i + 1])
        np.testing.assert_allclose(_np(sample), (x0 + sg * eps) / math.sqrt(1 + sg**2), atol=2e-5)
    np.testing.assert_allclose(_np(sample), x0, atol=1e-6)
    with pytest.raises(ValueError, match="set_timesteps"):
        k.DPMSolverMultistepScheduler(num_train_timesteps=T).step(lucid.zeros(1), 3, lucid.zeros(1))
    with pytest.raises(ValueError, match="not supported for `algorithm_type` dpmsolver"):
        k.DPMSolverMultistepScheduler(algorithm_type="dpmsolver")
    # Karras sigmas: rho = 7 interpolation between the extreme training sigmas; _sigma_to_t inverts the table
    s = k.DPMSolverMultistepScheduler(num_train_timesteps=T, beta_start=0.005, beta_end=0.2, use_karras_sigmas=True)
    s.set_timesteps(5)
    ac = np.cumprod(1 - np.linspace(0.005, 0.2, T, dtype=np.float32).astype(np.float64))
    sig = np.sqrt((1 - ac) / ac)
    ramp = np.linspace(0, 1, 5)
    kar = (sig[-1] ** (1 / 7) + ramp * (sig[0] ** (1 / 7) - sig[-1] ** (1 / 7))) ** 7
    np.testing.assert_allclose(_np(s.sigmas)[:-1], kar, rtol=1e-4)
    assert s.timesteps.tolist()[0] == T - 1 and s.timesteps.tolist()[-1] == 0
    logs = np.log(sig)
    assert [float(s._sigma_to_t(np.array(v), logs)) for v in sig[[0, 7, 31]]] == pytest.approx([0, 7, 31], abs=1e-6)
    # lambda_min_clipped: the last timestep is the first whose log-SNR is above the clip
    lam = 0.5 * np.log(ac / (1 - ac))
    s = k.DPMSolverMultistepScheduler(num_train_timesteps=T, beta_start=0.005, beta_end=0.2, lambda_min_clipped=-1.0)
    s.set_timesteps(4)
    last = T - np.searchsorted(lam[::-1], -1.0)
    assert s.timesteps.tolist() == np.linspace(0, last - 1, 5).round()[::-1][:-1].astype(np.int64).tolist()
    assert last < T
    # sde-dpmsolver++ with the noise handed in: its first-order step in closed form
    s = k.DPMSolverMultistepScheduler(num_train_timesteps=T, beta_start=0.005, beta_end=0.2,
                                      algorithm_type="sde-dpmsolver++", solver_order=1)
    s.set_timesteps(3)
    z = rng.standard_normal((2, 3)).astype(np.float32)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    out = _np(s.step(lucid.tensor(eps), s.timesteps[0], lucid.tensor(x), variance_noise=lucid.tensor(z)).prev_sample)
    sgs = _np(s.sigmas)
    a0, s0 = 1 / math.sqrt(1 + sgs[0] ** 2), sgs[0] / math.sqrt(1 + sgs[0] ** 2)
    a1, s1 = 1 / math.sqrt(1 + sgs[1] ** 2), sgs[1] / math.sqrt(1 + sgs[1] ** 2)
    h = math.log(a1 / s1) - math.log(a0 / s0)
    x0p = (x - s0 * eps) / a0
    want = s1 / s0 * math.exp(-h) * x + a1 * (1 - math.exp(-2 * h)) * x0p + s1 * math.sqrt(1 - math.exp(-2 * h)) * z
    np.testing.assert_allclose(out, want, atol=1e-5)


def _k_run(torch):
    k = k_schedulers_page(torch)
    rng = np.random.default_rng(23)
    x = rng.standard_normal((1, 3, 2, 2)).astype(np.float32)
    out = {}
    for cfg in [dict(solver_order=3, beta_schedule="squaredcos_cap_v2"),
                dict(use_karras_sigmas=True, thresholding=True, prediction_type="v_prediction", beta_end=0.2),
                dict(algorithm_type="sde-dpmsolver++", solver_type="heun", beta_schedule="squaredcos_cap_v2")]:
        s = k.DPMSolverMultistepScheduler(num_train_timesteps=60, **cfg)
        s.set_timesteps(5)
        smp = torch.tensor(x)
        for i, t in enumerate(s.timesteps):
            smp = s.step(torch.tanh(smp * 0.8 + 0.1 * i), t, smp, generator=_fixed(i)).prev_sample
        out[str(cfg)] = smp.numpy()
    e = k.EulerDiscreteScheduler(num_train_timesteps=60, beta_schedule="scaled_linear")
    e.set_timesteps(4)
    smp = torch.tensor(x) * e.init_noise_sigma
    for t in e.timesteps:
        smp = e.step(torch.tanh(e.scale_model_input(smp, t)), t, smp).prev_sample
    out["euler"] = smp.numpy()
    return out


def test_euler_and_dpmsolver_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _k_run(lucid), _k_run(torch)
    for key in b:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-5, err_msg=key)


# ======================================================================== diffusers models/embeddings.py
def embeddings_page(torch):
    """diffusers models/embeddings.py: timestep, sin-cos, rotary embeddings and PatchEmbed, on ``torch``."""
    nn = torch.nn

    def get_activation(act_fn):  # diffusers.models.activations.get_activation, the entries used here
        return {"silu": nn.SiLU(), "swish": nn.SiLU(), "mish": nn.Mish(), "gelu": nn.GELU(), "relu": nn.ReLU()}[act_fn]

    def get_timestep_embedding(
        timesteps,
        embedding_dim,
        flip_sin_to_cos=False,
        downscale_freq_shift=1,
        scale=1,
        max_period=10000,
    ):
        assert len(timesteps.shape) == 1, "Timesteps should be a 1d-array"

        half_dim = embedding_dim // 2
        exponent = -math.log(max_period) * torch.arange(
            start=0, end=half_dim, dtype=torch.float32, device=timesteps.device
        )
        exponent = exponent / (half_dim - downscale_freq_shift)

        emb = torch.exp(exponent)
        emb = timesteps[:, None].float() * emb[None, :]

        # scale embeddings
        emb = scale * emb

        # concat sine and cosine embeddings
        emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)

        # flip sine and cosine embeddings
        if flip_sin_to_cos:
            emb = torch.cat([emb[:, half_dim:], emb[:, :half_dim]], dim=-1)

        # zero pad
        if embedding_dim % 2 == 1:
            emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
        return emb

    def get_2d_sincos_pos_embed(
        embed_dim, grid_size, cls_token=False, extra_tokens=0, interpolation_scale=1.0, base_size=16
    ):
        if isinstance(grid_size, int):
            grid_size = (grid_size, grid_size)

        grid_h = np.arange(grid_size[0], dtype=np.float32) / (grid_size[0] / base_size) / interpolation_scale
        grid_w = np.arange(grid_size[1], dtype=np.float32) / (grid_size[1] / base_size) / interpolation_scale
        grid = np.meshgrid(grid_w, grid_h)  # here w goes first
        grid = np.stack(grid, axis=0)

        grid = grid.reshape([2, 1, grid_size[1], grid_size[0]])
        pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
        if cls_token and extra_tokens > 0:
            pos_embed = np.concatenate([np.zeros([extra_tokens, embed_dim]), pos_embed], axis=0)
        return pos_embed

    class PatchEmbed(nn.Module):
        """2D Image to Patch Embedding with support for SD3 cropping."""

        def __init__(
            self,
            height=224,
            width=224,
            patch_size=16,
            in_channels=3,
            embed_dim=768,
            layer_norm=False,
            flatten=True,
            bias=True,
            interpolation_scale=1,
            pos_embed_type="sincos",
            pos_embed_max_size=None,  # For SD3 cropping
        ):
            super().__init__()

            num_patches = (height // patch_size) * (width // patch_size)
            self.flatten = flatten
            self.layer_norm = layer_norm
            self.pos_embed_max_size = pos_embed_max_size

            self.proj = nn.Conv2d(
                in_channels, embed_dim, kernel_size=(patch_size, patch_size), stride=patch_size, bias=bias
            )
            if layer_norm:
                self.norm = nn.LayerNorm(embed_dim, elementwise_affine=False, eps=1e-6)
            else:
                self.norm = None

            self.patch_size = patch_size
            self.height, self.width = height // patch_size, width // patch_size
            self.base_size = height // patch_size
            self.interpolation_scale = interpolation_scale

            # Calculate positional embeddings based on max size or default
            if pos_embed_max_size:
                grid_size = pos_embed_max_size
            else:
                grid_size = int(num_patches**0.5)

            if pos_embed_type is None:
                self.pos_embed = None
            elif pos_embed_type == "sincos":
                pos_embed = get_2d_sincos_pos_embed(
                    embed_dim, grid_size, base_size=self.base_size, interpolation_scale=self.interpolation_scale
                )
                persistent = True if pos_embed_max_size else False
                self.register_buffer("pos_embed", torch.from_numpy(pos_embed).float().unsqueeze(0), persistent=persistent)
            else:
                raise ValueError(f"Unsupported pos_embed_type: {pos_embed_type}")

        def cropped_pos_embed(self, height, width):
            """Crops positional embeddings for SD3 compatibility."""
            if self.pos_embed_max_size is None:
                raise ValueError("`pos_embed_max_size` must be set for cropping.")

            height = height // self.patch_size
            width = width // self.patch_size
            if height > self.pos_embed_max_size:
                raise ValueError(
                    f"Height ({height}) cannot be greater than `pos_embed_max_size`: {self.pos_embed_max_size}."
                )
            if width > self.pos_embed_max_size:
                raise ValueError(
                    f"Width ({width}) cannot be greater than `pos_embed_max_size`: {self.pos_embed_max_size}."
                )

            top = (self.pos_embed_max_size - height) // 2
            left = (self.pos_embed_max_size - width) // 2
            spatial_pos_embed = self.pos_embed.reshape(1, self.pos_embed_max_size, self.pos_embed_max_size, -1)
            spatial_pos_embed = spatial_pos_embed[:, top : top + height, left : left + width, :]
            spatial_pos_embed = spatial_pos_embed.reshape(1, -1, spatial_pos_embed.shape[-1])
            return spatial_pos_embed

        def forward(self, latent):
            if self.pos_embed_max_size is not None:
                height, width = latent.shape[-2:]
            else:
                height, width = latent.shape[-2] // self.patch_size, latent.shape[-1] // self.patch_size

            latent = self.proj(latent)
            if self.flatten:
                latent = latent.flatten(2).transpose(1, 2)  # BCHW -> BNC
            if self.layer_norm:
                latent = self.norm(latent)
            if self.pos_embed is None:
                return latent.to(latent.dtype)
            # Interpolate or crop positional embeddings as needed
            if self.pos_embed_max_size:
                pos_embed = self.cropped_pos_embed(height, width)
            else:
                if self.height != height or self.width != width:
                    pos_embed = get_2d_sincos_pos_embed(
                        embed_dim=self.pos_embed.shape[-1],
                        grid_size=(height, width),
                        base_size=self.base_size,
                        interpolation_scale=self.interpolation_scale,
                    )
                    pos_embed = torch.from_numpy(pos_embed).float().unsqueeze(0).to(latent.device)
                else:
                    pos_embed = self.pos_embed

            return (latent + pos_embed).to(latent.dtype)

    def get_1d_rotary_pos_embed(dim, pos, theta=10000.0, use_real=False, linear_factor=1.0, ntk_factor=1.0):
        assert dim % 2 == 0

        if isinstance(pos, int):
            pos = np.arange(pos)
        theta = theta * ntk_factor
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim)) / linear_factor  # [D/2]
        t = torch.from_numpy(pos).to(freqs.device)  # type: ignore  # [S]
        freqs = torch.outer(t, freqs).float()  # type: ignore   # [S, D/2]
        if use_real:
            freqs_cos = freqs.cos().repeat_interleave(2, dim=1)  # [S, D]
            freqs_sin = freqs.sin().repeat_interleave(2, dim=1)  # [S, D]
            return freqs_cos, freqs_sin
        else:
            freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64     # [S, D/2]
            return freqs_cis

    def apply_rotary_emb(x, freqs_cis, use_real=True):
        if use_real:
            cos, sin = freqs_cis  # [S, D]
            cos = cos[None, None]
            sin = sin[None, None]
            cos, sin = cos.to(x.device), sin.to(x.device)

            x_real, x_imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)  # [B, S, H, D//2]
            x_rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(3)
            out = (x.float() * cos + x_rotated.float() * sin).to(x.dtype)

            return out
        else:
            x_rotated = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            freqs_cis = freqs_cis.unsqueeze(2)
            x_out = torch.view_as_real(x_rotated * freqs_cis).flatten(3)

            return x_out.type_as(x)

    class TimestepEmbedding(nn.Module):
        def __init__(
            self,
            in_channels,
            time_embed_dim,
            act_fn="silu",
            out_dim=None,
            post_act_fn=None,
            cond_proj_dim=None,
            sample_proj_bias=True,
        ):
            super().__init__()

            self.linear_1 = nn.Linear(in_channels, time_embed_dim, sample_proj_bias)

            if cond_proj_dim is not None:
                self.cond_proj = nn.Linear(cond_proj_dim, in_channels, bias=False)
            else:
                self.cond_proj = None

            self.act = get_activation(act_fn)

            if out_dim is not None:
                time_embed_dim_out = out_dim
            else:
                time_embed_dim_out = time_embed_dim
            self.linear_2 = nn.Linear(time_embed_dim, time_embed_dim_out, sample_proj_bias)

            if post_act_fn is None:
                self.post_act = None
            else:
                self.post_act = get_activation(post_act_fn)

        def forward(self, sample, condition=None):
            if condition is not None:
                sample = sample + self.cond_proj(condition)
            sample = self.linear_1(sample)

            if self.act is not None:
                sample = self.act(sample)

            sample = self.linear_2(sample)

            if self.post_act is not None:
                sample = self.post_act(sample)
            return sample

    class Timesteps(nn.Module):
        def __init__(self, num_channels, flip_sin_to_cos, downscale_freq_shift, scale=1):
            super().__init__()
            self.num_channels = num_channels
            self.flip_sin_to_cos = flip_sin_to_cos
            self.downscale_freq_shift = downscale_freq_shift
            self.scale = scale

        def forward(self, timesteps):
            t_emb = get_timestep_embedding(
                timesteps,
                self.num_channels,
                flip_sin_to_cos=self.flip_sin_to_cos,
                downscale_freq_shift=self.downscale_freq_shift,
                scale=self.scale,
            )
            return t_emb

    class SinusoidalPositionalEmbedding(nn.Module):
        def __init__(self, embed_dim, max_seq_length=32):
            super().__init__()
            position = torch.arange(max_seq_length).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, embed_dim, 2) * (-math.log(10000.0) / embed_dim))
            pe = torch.zeros(1, max_seq_length, embed_dim)
            pe[0, :, 0::2] = torch.sin(position * div_term)
            pe[0, :, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe)

        def forward(self, x):
            _, seq_length, _ = x.shape
            x = x + self.pe[:, :seq_length]
            return x

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_") and k != "nn"})


def _sincos_np(embed_dim, gh, gw, base_size, interp=1.0):
    """The 2-D table for a (gh, gw) grid, entry by entry: [sin/cos of row pos (D/4 each), sin/cos of col pos]."""
    om = 1 / 10000 ** (np.arange(embed_dim // 4) / (embed_dim // 4))
    rows = []
    for i in range(gh):
        for j in range(gw):
            # the 'h' half of the table encodes grid[0] = meshgrid's first plane = the column coordinate
            a = j / (gw / base_size) / interp
            b = i / (gh / base_size) / interp
            rows.append(np.concatenate([np.sin(a * om), np.cos(a * om), np.sin(b * om), np.cos(b * om)]))
    return np.array(rows)


def test_diffusers_timestep_and_sinusoidal_embeddings():
    e = embeddings_page(lucid)
    t = np.array([0.0, 1.0, 17.5, 999.0])
    for dim, flip, shift, scale in [(8, False, 1, 1), (8, True, 0, 1), (7, True, 1, 2.5)]:
        got = _np(e.get_timestep_embedding(lucid.tensor(t), dim, flip_sin_to_cos=flip, downscale_freq_shift=shift,
                                           scale=scale))
        half = dim // 2
        f = np.exp(-math.log(10000) * np.arange(half) / (half - shift))
        a = scale * t[:, None] * f
        want = np.concatenate([np.cos(a), np.sin(a)] if flip else [np.sin(a), np.cos(a)], 1)
        if dim % 2:
            want = np.concatenate([want, np.zeros((4, 1))], 1)
        np.testing.assert_allclose(got, want, atol=3e-4)
    with pytest.raises(AssertionError, match="1d-array"):
        e.get_timestep_embedding(lucid.zeros(2, 2), 4)
    # Timesteps -> TimestepEmbedding (linear, SiLU, linear, optional cond projection and post activation)
    lucid.manual_seed(0)
    proj = e.Timesteps(8, True, 0)
    emb = e.TimestepEmbedding(8, 6, cond_proj_dim=3, post_act_fn="silu")
    _load(lucid, emb, 30)
    cond = np.random.default_rng(31).standard_normal((4, 3)).astype(np.float32)
    got = _np(emb(proj(lucid.tensor(t)), lucid.tensor(cond)))
    sd = {k: _np(v) for k, v in emb.state_dict().items()}
    f = np.exp(-math.log(10000) * np.arange(4) / 4)
    s_in = np.concatenate([np.cos(t[:, None] * f), np.sin(t[:, None] * f)], 1) + cond @ sd["cond_proj.weight"].T
    silu = lambda a: a / (1 + np.exp(-a))
    h = silu(s_in @ sd["linear_1.weight"].T + sd["linear_1.bias"])
    np.testing.assert_allclose(got, silu(h @ sd["linear_2.weight"].T + sd["linear_2.bias"]), atol=3e-4)
    # SinusoidalPositionalEmbedding: strided in-place writes of sin/cos into the even/odd channels
    pe = e.SinusoidalPositionalEmbedding(6, max_seq_length=5)
    x = lucid.zeros(2, 3, 6)
    got = _np(pe(x))
    pos = np.arange(3)[:, None]
    div = np.exp(np.arange(0, 6, 2) * (-math.log(10000.0) / 6))
    want = np.zeros((3, 6))
    want[:, 0::2], want[:, 1::2] = np.sin(pos * div), np.cos(pos * div)
    np.testing.assert_allclose(got, np.broadcast_to(want, (2, 3, 6)), atol=1e-6)
    assert "pe" in dict(pe.named_buffers())


def test_diffusers_rotary_embeddings_are_relative_rotations():
    e = embeddings_page(lucid)
    S, D = 5, 8
    cos, sin = e.get_1d_rotary_pos_embed(D, S, use_real=True)
    fr = 1 / 10000 ** (np.arange(0, D, 2) / D)
    ang = np.arange(S)[:, None] * fr
    np.testing.assert_allclose(_np(cos), np.repeat(np.cos(ang), 2, axis=1), atol=1e-6)
    np.testing.assert_allclose(_np(sin), np.repeat(np.sin(ang), 2, axis=1), atol=1e-6)
    cis = e.get_1d_rotary_pos_embed(D, S, use_real=False)
    assert cis.dtype == lucid.complex64
    c = cis.cpu().numpy() if lucid.get_default_device().type == "cpu" else None
    if c is not None:
        np.testing.assert_allclose(c, np.exp(1j * ang), atol=1e-6)
    rng = np.random.default_rng(32)
    q = rng.standard_normal((1, 1, S, D)).astype(np.float32)  # [B, H, S, D]
    qr = e.apply_rotary_emb(lucid.tensor(q), (cos, sin), use_real=True)
    # each channel pair (2i, 2i+1) is rotated by the angle pos * freq_i
    qc = q[..., 0::2] + 1j * q[..., 1::2]
    rot = qc * np.exp(1j * ang)[None, None]
    np.testing.assert_allclose(_np(qr)[..., 0::2], rot.real, atol=1e-5)
    np.testing.assert_allclose(_np(qr)[..., 1::2], rot.imag, atol=1e-5)
    # the complex path ([B, S, H, D] layout, freqs [B, S, D/2] as Lumina hands them) gives the same rotation
    qs = np.transpose(q, (0, 2, 1, 3))
    qr2 = e.apply_rotary_emb(lucid.tensor(qs), cis.unsqueeze(0), use_real=False)
    np.testing.assert_allclose(np.transpose(_np(qr2), (0, 2, 1, 3)), _np(qr), atol=1e-5)
    # relative position: <R(m) q, R(n) k> depends on m - n only
    k = rng.standard_normal((1, 1, S, D)).astype(np.float32)
    v = np.full((1, 1, S, D), 1.0, np.float32) * q[:, :, :1]
    w = np.full((1, 1, S, D), 1.0, np.float32) * k[:, :, :1]
    a, b = _np(e.apply_rotary_emb(lucid.tensor(v), (cos, sin))), _np(e.apply_rotary_emb(lucid.tensor(w), (cos, sin)))
    dots = a[0, 0] @ b[0, 0].T
    for dlt in range(-2, 3):
        diag = np.diagonal(dots, offset=dlt)
        assert np.ptp(diag) < 1e-4, dlt


def test_diffusers_patch_embed_sincos_and_sd3_crop():
    e = embeddings_page(lucid)
    lucid.manual_seed(0)
    dev = lucid.get_default_device()  # the sin-cos buffer comes from NumPy (host): move the module, as on a GPU
    pe = e.PatchEmbed(height=8, width=8, patch_size=2, in_channels=3, embed_dim=8).to(dev)
    np.testing.assert_allclose(_np(pe.pos_embed)[0], _sincos_np(8, 4, 4, base_size=4), atol=1e-6)
    assert "pos_embed" not in pe.state_dict()  # not persistent without pos_embed_max_size
    x = np.random.default_rng(33).standard_normal((2, 3, 8, 8)).astype(np.float32)
    w, bias = _np(pe.proj.weight), _np(pe.proj.bias)
    pt = x.reshape(2, 3, 4, 2, 4, 2).transpose(0, 2, 4, 1, 3, 5).reshape(2, 16, 12)
    np.testing.assert_allclose(_np(pe(lucid.tensor(x))), pt @ w.reshape(8, -1).T + bias + _sincos_np(8, 4, 4, 4),
                               atol=1e-5)
    # another input size: the table is recomputed for the new grid with the training base size
    x2 = np.random.default_rng(34).standard_normal((1, 3, 4, 8)).astype(np.float32)
    pt2 = x2.reshape(1, 3, 2, 2, 4, 2).transpose(0, 2, 4, 1, 3, 5).reshape(1, 8, 12)
    got = _np(pe(lucid.tensor(x2)))
    tab = e.get_2d_sincos_pos_embed(8, (2, 4), base_size=4)
    np.testing.assert_allclose(got, pt2 @ w.reshape(8, -1).T + bias + tab, atol=1e-5)
    # SD3: a persistent max-size table, centre-cropped to the input's patch grid
    sd3 = e.PatchEmbed(height=8, width=8, patch_size=2, in_channels=3, embed_dim=8, pos_embed_max_size=6).to(dev)
    assert "pos_embed" in sd3.state_dict()
    full = _sincos_np(8, 6, 6, base_size=4).reshape(6, 6, 8)
    np.testing.assert_allclose(_np(sd3.cropped_pos_embed(4, 8))[0], full[2:4, 1:5].reshape(-1, 8), atol=1e-6)
    with pytest.raises(ValueError, match="cannot be greater than `pos_embed_max_size`"):
        sd3.cropped_pos_embed(14, 2)
    with pytest.raises(ValueError, match="must be set for cropping"):
        pe.cropped_pos_embed(4, 4)


def _emb_run(torch):
    e = embeddings_page(torch)
    torch.manual_seed(0)
    pe = e.PatchEmbed(height=8, width=8, patch_size=2, in_channels=3, embed_dim=8, layer_norm=True,
                      pos_embed_max_size=6).to(torch.get_default_device())
    te = e.TimestepEmbedding(8, 6, act_fn="mish", out_dim=5)
    _load(torch, pe, 40)
    _load(torch, te, 41)
    x = torch.tensor(np.random.default_rng(35).standard_normal((2, 3, 6, 8)).astype(np.float32))
    cs = e.get_1d_rotary_pos_embed(8, 12, use_real=True, linear_factor=2.0, ntk_factor=1.5)
    tok = pe(x).reshape(2, 12, 1, 8).transpose(1, 2)
    rope = e.apply_rotary_emb(tok, cs)
    temb = te(e.Timesteps(8, False, 1, scale=3)(torch.tensor([2.0, 40.0])))
    return pe(x).detach().numpy(), rope.detach().numpy(), temb.detach().numpy()


def test_diffusers_embeddings_torch_parity():
    torch = pytest.importorskip("torch")
    for u, v in zip(_emb_run(lucid), _emb_run(torch)):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-5)


def test_searchsorted_python_scalar_goes_to_the_sequence_device():
    """Fixed on the way: ``searchsorted(seq_on_a_device, -inf)`` (DPM-Solver's lambda clipping) made the
    Python number a host tensor and refused to mix it with the device sequence; PyTorch takes a Scalar
    where the sequence is. ``bucketize`` of a number goes the same way."""
    from lucid.testing import strict_device

    strict_device.enable()
    for dev in ("strict:0", "strict:1"):
        seq = lucid.tensor([-3.0, -1.0, 2.0, 5.0], device=dev)
        for v, right, want in [(-float("inf"), False, 0), (2.0, False, 2), (2.0, True, 3), (9.0, False, 4)]:
            out = lucid.searchsorted(seq, v, right=right)
            assert out.device == seq.device and out.shape == () and out.dtype == lucid.int64
            assert int(out.cpu().item()) == want
            assert want == int(np.searchsorted([-3, -1, 2, 5], v, "right" if right else "left"))
        b = lucid.bucketize(1.5, seq)
        assert b.device == seq.device and int(b.cpu().item()) == 2
    with pytest.raises(RuntimeError, match="searchsorted: .*devices"):
        lucid.searchsorted(lucid.tensor([1.0, 2.0], device="strict:0"), lucid.tensor([1.5], device="cpu"))
