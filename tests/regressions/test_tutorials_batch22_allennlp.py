"""AllenNLP (``allenai/allennlp``) pure-PyTorch code run on Lucid (``import lucid as torch``).

Ported from ``allennlp/nn/util.py`` (text kept): ``get_lengths_from_binary_sequence_mask``,
``get_mask_from_sequence_lengths``, ``sort_batch_by_length``, ``get_final_encoder_states``,
``masked_softmax`` (both ``memory_efficient`` branches), ``masked_log_softmax``, ``masked_max``,
``masked_mean``, ``masked_flip`` (``pad_sequence``), ``viterbi_decode`` (observations, allowed
start/end transitions, ``top_k``), ``get_text_field_mask``, ``weighted_sum``,
``sequence_cross_entropy_with_logits`` (``label_smoothing``, focal ``gamma``, float and list
``alpha``, the three averages), ``replace_masked_values``, ``combine_tensors`` and
``combine_tensors_and_multiply``, ``get_combined_dim``, ``logsumexp``,
``flatten_and_batch_shift_indices``, ``batched_index_select``, ``batched_span_select``,
``flattened_index_select``, ``get_range_vector``, ``bucket_values``,
``add_sentence_boundary_token_ids``/``remove_sentence_boundaries``, ``add_positional_features``,
``masked_topk`` and the ``*_value_of_dtype`` helpers; ``nn/initializers.py``'s
``block_orthogonal``; and from ``allennlp/modules/``: ``conditional_random_field.py``
(``allowed_transitions``/``is_transition_allowed``, ``ConditionalRandomField`` with constraints,
its forward-algorithm log-likelihood and constrained top-k ``viterbi_tags``), ``scalar_mix.py``,
``highway.py``, ``time_distributed.py``, ``span_extractors`` (``EndpointSpanExtractor`` with
exclusive starts and bucketed width embeddings, ``SelfAttentiveSpanExtractor``),
``matrix_attention`` (``LinearMatrixAttention``, ``BilinearMatrixAttention``,
``CosineMatrixAttention``), ``seq2vec_encoders`` (``CnnEncoder``, ``BagOfEmbeddingsEncoder``),
``masked_layer_norm.py``, ``maxout.py``, ``gated_sum.py`` and ``lstm_cell_with_projection.py``
(``LstmCellWithProjection``, the ELMo cell). A tiny tagger (``Embedding`` -> the ELMo cell ->
``Linear`` -> the BIO-constrained CRF) is trained with Adam, as AllenNLP's ``CrfTagger`` does.
``nn/beam_search.py``: ``BeamSearch`` (``min_steps``, the early stop, the empty-sequence warning,
step functions with and without the timestep, a multi-layer ``decoder_hidden`` state reordered
by ``gather`` on the backpointers) with its ``DeterministicSampler``, ``MultinomialSampler``,
``TopKSampler``, ``TopPSampler`` (in-place shifted exclusion mask, boolean-mask setitem) and
``GumbelSampler`` (Gumbel-top-k, stochastic beam search). ``training/metrics/categorical_accuracy.py``
(top-k, tie-break through a two-tensor advanced index, ``unsqueeze_``, masks, a Python float
accumulating tensors).

Checks without PyTorch: NumPy recomputations of every util; the CRF's log-partition by brute-force
enumeration of all tag sequences (tiny sizes), its Viterbi (constrained, top-k) by enumeration of
the allowed paths; ``viterbi_decode`` by enumeration with start/end restrictions; float64 central
differences of the CRF log-likelihood, ``sequence_cross_entropy_with_logits`` and the LSTM cell;
the LSTM cell against a NumPy loop over its variable-length batch; every module against a NumPy
formula; beam search against a NumPy beam search over a history-dependent toy decoder (every
sampler's returned log-probabilities equal to its sequences' recomputed ones; Gumbel's
``gumbel_with_max`` maximum exactly at ``T``; top-k/top-p draws inside their candidate sets); the
tagger's loss falling 4.8 -> 0.03 in 12 steps and its Viterbi tags exact. The ``*_torch_parity``
tests run the same text on PyTorch with the same weights and data. No Lucid fix was needed for the
numbers: every page gave PyTorch's.

Fixed on the way: ``torch.multinomial(w, n)`` without replacement raised "fewer than num_samples
categories have non-zero weight" when a row had fewer than ``n`` non-zero weights; PyTorch 2.x
(its ``p / Exp(1)`` top-k) returns the non-zero categories first, then zero-weight ones, and
AllenNLP's ``MultinomialSampler`` (without replacement by default) meets this on every finished
beam (a one-hot row) when ``per_node_beam_size > 1``.

Pinned on the way, as PyTorch does them (AllenNLP's behaviour, not Lucid's): ``viterbi_decode``
with allowed start/end transitions passes the START/END sentinels as observations, so its score is
the END one-hot's 100000 and only its top-1 path is meaningful (the lower top-k entries are ties
at 0); ``CnnEncoder`` in float64 returns NaN, because ``bool_mask * min_value_of_dtype(float64)`` is
a float32 product (-inf) and ``0 * -inf`` is NaN (float32, its default, is fine); a bool mask plus
a Python float (``masked_log_softmax``) is float32, so its log is float32's. Legacy constructors
(``torch.FloatTensor``, ``torch.Tensor(n)`` in PyTorch) make CPU parameters: the modules are moved
with ``.to(device)``, as a model is.

Adapted: registries (``@SpanExtractor.register``), ``overrides`` and ``Activation.by_name`` are
left out (``Activation.by_name("relu")()`` is ``torch.nn.ReLU()``, ``"linear"`` the identity);
``ConfigurationError`` is a local ``Exception`` subclass; the ``SpanExtractor`` base and
``Embedding`` token embedder are ``torch.nn.Module`` and ``torch.nn.Embedding``; ``viterbi_decode``'s
``logger.warning`` is a ``pass``; ``block_orthogonal`` is the version in ``nn/initializers.py``;
the samplers and ``BeamSearch`` drop ``Registrable``/``FromParams``. The sampler runs of the beam
search draw with replacement: a finished beam's row is one-hot, and two draws without replacement
from it give a zero-probability (-inf) candidate (PyTorch's behaviour, see the fix above).
"""
import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


# ----------------------------------------------------------------------------------------------
# allennlp, ported (the files' text inside one function of the module handed in as ``torch``)
# ----------------------------------------------------------------------------------------------
def allennlp(torch):
    import numpy
    from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

    class ConfigurationError(Exception):
        pass

    T = TypeVar("T")

    # ---------------------------------------------------------------- allennlp/nn/util.py
    def get_lengths_from_binary_sequence_mask(mask):
        return mask.sum(-1)

    def get_mask_from_sequence_lengths(sequence_lengths, max_length: int):
        # (batch_size, max_length)
        ones = sequence_lengths.new_ones(sequence_lengths.size(0), max_length)
        range_tensor = ones.cumsum(dim=1)
        return sequence_lengths.unsqueeze(1) >= range_tensor

    def sort_batch_by_length(tensor, sequence_lengths):
        if not isinstance(tensor, torch.Tensor) or not isinstance(sequence_lengths, torch.Tensor):
            raise ConfigurationError("Both the tensor and sequence lengths must be torch.Tensors.")

        sorted_sequence_lengths, permutation_index = sequence_lengths.sort(0, descending=True)
        sorted_tensor = tensor.index_select(0, permutation_index)

        index_range = torch.arange(0, len(sequence_lengths), device=sequence_lengths.device)
        # This is the equivalent of zipping with index, sorting by the original
        # sequence lengths and returning the now sorted indices.
        _, reverse_mapping = permutation_index.sort(0, descending=False)
        restoration_indices = index_range.index_select(0, reverse_mapping)
        return sorted_tensor, sorted_sequence_lengths, restoration_indices, permutation_index

    def get_final_encoder_states(encoder_outputs, mask, bidirectional: bool = False):
        last_word_indices = mask.sum(1) - 1
        batch_size, _, encoder_output_dim = encoder_outputs.size()
        expanded_indices = last_word_indices.view(-1, 1, 1).expand(batch_size, 1, encoder_output_dim)
        # Shape: (batch_size, 1, encoder_output_dim)
        final_encoder_output = encoder_outputs.gather(1, expanded_indices)
        final_encoder_output = final_encoder_output.squeeze(1)  # (batch_size, encoder_output_dim)
        if bidirectional:
            final_forward_output = final_encoder_output[:, : (encoder_output_dim // 2)]
            final_backward_output = encoder_outputs[:, 0, (encoder_output_dim // 2) :]
            final_encoder_output = torch.cat([final_forward_output, final_backward_output], dim=-1)
        return final_encoder_output

    def get_dropout_mask(dropout_probability: float, tensor_for_masking):
        binary_mask = (torch.rand(tensor_for_masking.size()) > dropout_probability).to(
            tensor_for_masking.device
        )
        # Scale mask by 1/keep_prob to preserve output statistics.
        dropout_mask = binary_mask.float().div(1.0 - dropout_probability)
        return dropout_mask

    def masked_softmax(vector, mask, dim: int = -1, memory_efficient: bool = False):
        if mask is None:
            result = torch.nn.functional.softmax(vector, dim=dim)
        else:
            while mask.dim() < vector.dim():
                mask = mask.unsqueeze(1)
            if not memory_efficient:
                # To limit numerical errors from large vector elements outside the mask, we zero these out.
                result = torch.nn.functional.softmax(vector * mask, dim=dim)
                result = result * mask
                result = result / (
                    result.sum(dim=dim, keepdim=True) + tiny_value_of_dtype(result.dtype)
                )
            else:
                masked_vector = vector.masked_fill(~mask, min_value_of_dtype(vector.dtype))
                result = torch.nn.functional.softmax(masked_vector, dim=dim)
        return result

    def masked_log_softmax(vector, mask, dim: int = -1):
        if mask is not None:
            while mask.dim() < vector.dim():
                mask = mask.unsqueeze(1)
            # vector + mask.log() is an easy way to zero out masked elements in logspace, but it
            # results in nans when the whole vector is masked.  We need a very small value instead of a
            # zero in the mask for these cases.
            vector = vector + (mask + tiny_value_of_dtype(vector.dtype)).log()
        return torch.nn.functional.log_softmax(vector, dim=dim)

    def masked_max(vector, mask, dim: int, keepdim: bool = False):
        replaced_vector = vector.masked_fill(~mask, min_value_of_dtype(vector.dtype))
        max_value, _ = replaced_vector.max(dim=dim, keepdim=keepdim)
        return max_value

    def masked_mean(vector, mask, dim: int, keepdim: bool = False):
        replaced_vector = vector.masked_fill(~mask, 0.0)

        value_sum = torch.sum(replaced_vector, dim=dim, keepdim=keepdim)
        value_count = torch.sum(mask, dim=dim, keepdim=keepdim)
        return value_sum / value_count.float().clamp(min=tiny_value_of_dtype(torch.float))

    def masked_flip(padded_sequence, sequence_lengths: List[int]):
        assert padded_sequence.size(0) == len(
            sequence_lengths
        ), f"sequence_lengths length ${len(sequence_lengths)} does not match batch size ${padded_sequence.size(0)}"
        num_timesteps = padded_sequence.size(1)
        flipped_padded_sequence = torch.flip(padded_sequence, [1])
        sequences = [
            flipped_padded_sequence[i, num_timesteps - length :]
            for i, length in enumerate(sequence_lengths)
        ]
        return torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True)

    def viterbi_decode(
        tag_sequence,
        transition_matrix,
        tag_observations: Optional[List[int]] = None,
        allowed_start_transitions=None,
        allowed_end_transitions=None,
        top_k: int = None,
    ):
        if top_k is None:
            top_k = 1
            flatten_output = True
        elif top_k >= 1:
            flatten_output = False
        else:
            raise ValueError(f"top_k must be either None or an integer >=1. Instead received {top_k}")

        sequence_length, num_tags = list(tag_sequence.size())

        has_start_end_restrictions = (
            allowed_end_transitions is not None or allowed_start_transitions is not None
        )

        if has_start_end_restrictions:

            if allowed_end_transitions is None:
                allowed_end_transitions = torch.zeros(num_tags)
            if allowed_start_transitions is None:
                allowed_start_transitions = torch.zeros(num_tags)

            num_tags = num_tags + 2
            new_transition_matrix = torch.zeros(num_tags, num_tags)
            new_transition_matrix[:-2, :-2] = transition_matrix

            # Start and end transitions are fully defined, but cannot transition between each other.

            allowed_start_transitions = torch.cat(
                [allowed_start_transitions, torch.tensor([-math.inf, -math.inf])]
            )
            allowed_end_transitions = torch.cat(
                [allowed_end_transitions, torch.tensor([-math.inf, -math.inf])]
            )

            # First define how we may transition FROM the start and end tags.
            new_transition_matrix[-2, :] = allowed_start_transitions
            # We cannot transition from the end tag to any tag.
            new_transition_matrix[-1, :] = -math.inf

            new_transition_matrix[:, -1] = allowed_end_transitions
            # We cannot transition to the start tag from any tag.
            new_transition_matrix[:, -2] = -math.inf

            transition_matrix = new_transition_matrix

        if tag_observations:
            if len(tag_observations) != sequence_length:
                raise ConfigurationError(
                    "Observations were provided, but they were not the same length "
                    "as the sequence. Found sequence of length: {} and evidence: {}".format(
                        sequence_length, tag_observations
                    )
                )
        else:
            tag_observations = [-1 for _ in range(sequence_length)]

        if has_start_end_restrictions:
            tag_observations = [num_tags - 2] + tag_observations + [num_tags - 1]
            zero_sentinel = torch.zeros(1, num_tags)
            extra_tags_sentinel = torch.ones(sequence_length, 2) * -math.inf
            tag_sequence = torch.cat([tag_sequence, extra_tags_sentinel], -1)
            tag_sequence = torch.cat([zero_sentinel, tag_sequence, zero_sentinel], 0)
            sequence_length = tag_sequence.size(0)

        path_scores = []
        path_indices = []

        if tag_observations[0] != -1:
            one_hot = torch.zeros(num_tags)
            one_hot[tag_observations[0]] = 100000.0
            path_scores.append(one_hot.unsqueeze(0))
        else:
            path_scores.append(tag_sequence[0, :].unsqueeze(0))

        # Evaluate the scores for all possible paths.
        for timestep in range(1, sequence_length):
            # Add pairwise potentials to current scores.
            summed_potentials = path_scores[timestep - 1].unsqueeze(2) + transition_matrix
            summed_potentials = summed_potentials.view(-1, num_tags)

            # Best pairwise potential path score from the previous timestep.
            max_k = min(summed_potentials.size()[0], top_k)
            scores, paths = torch.topk(summed_potentials, k=max_k, dim=0)

            # If we have an observation for this timestep, use it
            # instead of the distribution over tags.
            observation = tag_observations[timestep]
            # Warn the user if they have passed
            # invalid/extremely unlikely evidence.
            if tag_observations[timestep - 1] != -1 and observation != -1:
                if transition_matrix[tag_observations[timestep - 1], observation] < -10000:
                    pass  # logger.warning(...)
            if observation != -1:
                one_hot = torch.zeros(num_tags)
                one_hot[observation] = 100000.0
                path_scores.append(one_hot.unsqueeze(0))
            else:
                path_scores.append(tag_sequence[timestep, :] + scores)
            path_indices.append(paths.squeeze())

        # Construct the most likely sequence backwards.
        path_scores_v = path_scores[-1].view(-1)
        max_k = min(path_scores_v.size()[0], top_k)
        viterbi_scores, best_paths = torch.topk(path_scores_v, k=max_k, dim=0)
        viterbi_paths = []
        for i in range(max_k):
            viterbi_path = [best_paths[i]]
            for backward_timestep in reversed(path_indices):
                viterbi_path.append(int(backward_timestep.view(-1)[viterbi_path[-1]]))
            # Reverse the backward path.
            viterbi_path.reverse()

            if has_start_end_restrictions:
                viterbi_path = viterbi_path[1:-1]

            # Viterbi paths uses (num_tags * n_permutations) nodes; therefore, we need to modulo.
            viterbi_path = [j % num_tags for j in viterbi_path]
            viterbi_paths.append(viterbi_path)

        if flatten_output:
            return viterbi_paths[0], viterbi_scores[0]

        return viterbi_paths, viterbi_scores

    def get_text_field_mask(text_field_tensors, num_wrapping_dims: int = 0, padding_id: int = 0):
        masks = []
        for indexer_name, indexer_tensors in text_field_tensors.items():
            if "mask" in indexer_tensors:
                masks.append(indexer_tensors["mask"].bool())
        if len(masks) == 1:
            return masks[0]
        elif len(masks) > 1:
            raise ValueError("found two mask outputs; not sure which to use!")

        tensor_dims = [
            (tensor.dim(), tensor)
            for indexer_output in text_field_tensors.values()
            for tensor in indexer_output.values()
        ]
        tensor_dims.sort(key=lambda x: x[0])

        smallest_dim = tensor_dims[0][0] - num_wrapping_dims
        if smallest_dim == 2:
            token_tensor = tensor_dims[0][1]
            return token_tensor != padding_id
        elif smallest_dim == 3:
            character_tensor = tensor_dims[0][1]
            return (character_tensor != padding_id).any(dim=-1)
        else:
            raise ValueError("Expected a tensor with dimension 2 or 3, found {}".format(smallest_dim))

    def weighted_sum(matrix, attention):
        if attention.dim() == 2 and matrix.dim() == 3:
            return attention.unsqueeze(1).bmm(matrix).squeeze(1)
        if attention.dim() == 3 and matrix.dim() == 3:
            return attention.bmm(matrix)
        if matrix.dim() - 1 < attention.dim():
            expanded_size = list(matrix.size())
            for i in range(attention.dim() - matrix.dim() + 1):
                matrix = matrix.unsqueeze(1)
                expanded_size.insert(i + 1, attention.size(i + 1))
            matrix = matrix.expand(*expanded_size)
        intermediate = attention.unsqueeze(-1).expand_as(matrix) * matrix
        return intermediate.sum(dim=-2)

    def sequence_cross_entropy_with_logits(
        logits,
        targets,
        weights,
        average: str = "batch",
        label_smoothing: float = None,
        gamma: float = None,
        alpha=None,
    ):
        if average not in {None, "token", "batch"}:
            raise ValueError("Got average f{average}, expected one of None, 'token', or 'batch'")

        # make sure weights are float
        weights = weights.to(logits.dtype)
        # sum all dim except batch
        non_batch_dims = tuple(range(1, len(weights.shape)))
        # shape : (batch_size,)
        weights_batch_sum = weights.sum(dim=non_batch_dims)
        # shape : (batch * sequence_length, num_classes)
        logits_flat = logits.view(-1, logits.size(-1))
        # shape : (batch * sequence_length, num_classes)
        log_probs_flat = torch.nn.functional.log_softmax(logits_flat, dim=-1)
        # shape : (batch * max_len, 1)
        targets_flat = targets.view(-1, 1).long()
        # focal loss coefficient
        if gamma:
            # shape : (batch * sequence_length, num_classes)
            probs_flat = log_probs_flat.exp()
            # shape : (batch * sequence_length,)
            probs_flat = torch.gather(probs_flat, dim=1, index=targets_flat)
            # shape : (batch * sequence_length,)
            focal_factor = (1.0 - probs_flat) ** gamma
            # shape : (batch, sequence_length)
            focal_factor = focal_factor.view(*targets.size())
            weights = weights * focal_factor

        if alpha is not None:
            # shape : () / (num_classes,)
            if isinstance(alpha, (float, int)):

                # shape : (2,)
                alpha_factor = torch.tensor(
                    [1.0 - float(alpha), float(alpha)], dtype=weights.dtype, device=weights.device
                )

            elif isinstance(alpha, (list, numpy.ndarray, torch.Tensor)):

                # shape : (c,)
                alpha_factor = torch.tensor(alpha, dtype=weights.dtype, device=weights.device)

                if not alpha_factor.size():
                    # shape : (1,)
                    alpha_factor = alpha_factor.view(1)
                    # shape : (2,)
                    alpha_factor = torch.cat([1 - alpha_factor, alpha_factor])
            else:
                raise TypeError(
                    ("alpha must be float, list of float, or torch.FloatTensor, {} provided.").format(
                        type(alpha)
                    )
                )
            # shape : (batch, max_len)
            alpha_factor = torch.gather(alpha_factor, dim=0, index=targets_flat.view(-1)).view(
                *targets.size()
            )
            weights = weights * alpha_factor

        if label_smoothing is not None and label_smoothing > 0.0:
            num_classes = logits.size(-1)
            smoothing_value = label_smoothing / num_classes
            # Fill all the correct indices with 1 - smoothing value.
            one_hot_targets = torch.zeros_like(log_probs_flat).scatter_(
                -1, targets_flat, 1.0 - label_smoothing
            )
            smoothed_targets = one_hot_targets + smoothing_value
            negative_log_likelihood_flat = -log_probs_flat * smoothed_targets
            negative_log_likelihood_flat = negative_log_likelihood_flat.sum(-1, keepdim=True)
        else:
            # shape : (batch * sequence_length, 1)
            negative_log_likelihood_flat = -torch.gather(log_probs_flat, dim=1, index=targets_flat)
        # shape : (batch, sequence_length)
        negative_log_likelihood = negative_log_likelihood_flat.view(*targets.size())
        # shape : (batch, sequence_length)
        negative_log_likelihood = negative_log_likelihood * weights

        if average == "batch":
            # shape : (batch_size,)
            per_batch_loss = negative_log_likelihood.sum(non_batch_dims) / (
                weights_batch_sum + tiny_value_of_dtype(negative_log_likelihood.dtype)
            )
            num_non_empty_sequences = (weights_batch_sum > 0).sum() + tiny_value_of_dtype(
                negative_log_likelihood.dtype
            )
            return per_batch_loss.sum() / num_non_empty_sequences
        elif average == "token":
            return negative_log_likelihood.sum() / (
                weights_batch_sum.sum() + tiny_value_of_dtype(negative_log_likelihood.dtype)
            )
        else:
            # shape : (batch_size,)
            per_batch_loss = negative_log_likelihood.sum(non_batch_dims) / (
                weights_batch_sum + tiny_value_of_dtype(negative_log_likelihood.dtype)
            )
            return per_batch_loss

    def replace_masked_values(tensor, mask, replace_with: float):
        if tensor.dim() != mask.dim():
            raise ConfigurationError(
                "tensor.dim() (%d) != mask.dim() (%d)" % (tensor.dim(), mask.dim())
            )
        return tensor.masked_fill(~mask, replace_with)

    def combine_tensors(combination: str, tensors):
        if len(tensors) > 9:
            raise ConfigurationError("Double-digit tensor lists not currently supported")
        combination = combination.replace("x", "1").replace("y", "2")
        to_concatenate = [_get_combination(piece, tensors) for piece in combination.split(",")]
        return torch.cat(to_concatenate, dim=-1)

    def _rindex(sequence: Sequence[T], obj: T) -> int:
        for i in range(len(sequence) - 1, -1, -1):
            if sequence[i] == obj:
                return i

        raise ValueError(f"Unable to find {obj} in sequence {sequence}.")

    def _get_combination(combination: str, tensors):
        if combination.isdigit():
            index = int(combination) - 1
            return tensors[index]
        else:
            if len(combination) != 3:
                raise ConfigurationError("Invalid combination: " + combination)
            first_tensor = _get_combination(combination[0], tensors)
            second_tensor = _get_combination(combination[2], tensors)
            operation = combination[1]
            if operation == "*":
                return first_tensor * second_tensor
            elif operation == "/":
                return first_tensor / second_tensor
            elif operation == "+":
                return first_tensor + second_tensor
            elif operation == "-":
                return first_tensor - second_tensor
            else:
                raise ConfigurationError("Invalid operation: " + operation)

    def combine_tensors_and_multiply(combination: str, tensors, weights):
        if len(tensors) > 9:
            raise ConfigurationError("Double-digit tensor lists not currently supported")
        combination = combination.replace("x", "1").replace("y", "2")
        pieces = combination.split(",")
        tensor_dims = [tensor.size(-1) for tensor in tensors]
        combination_dims = [_get_combination_dim(piece, tensor_dims) for piece in pieces]
        dims_so_far = 0
        to_sum = []
        for piece, combination_dim in zip(pieces, combination_dims):
            weight = weights[dims_so_far : (dims_so_far + combination_dim)]
            dims_so_far += combination_dim
            to_sum.append(_get_combination_and_multiply(piece, tensors, weight))
        result = to_sum[0]
        for result_piece in to_sum[1:]:
            result = result + result_piece
        return result

    def _get_combination_and_multiply(combination: str, tensors, weight):
        if combination.isdigit():
            index = int(combination) - 1
            return torch.matmul(tensors[index], weight)
        else:
            if len(combination) != 3:
                raise ConfigurationError("Invalid combination: " + combination)
            first_tensor = _get_combination(combination[0], tensors)
            second_tensor = _get_combination(combination[2], tensors)
            operation = combination[1]
            if operation == "*":
                if first_tensor.dim() > 4 or second_tensor.dim() > 4:
                    raise ValueError("Tensors with dim > 4 not currently supported")
                desired_dim = max(first_tensor.dim(), second_tensor.dim()) - 1
                if first_tensor.dim() == 4:
                    expanded_dim = _rindex(first_tensor.size(), 1)
                    first_tensor = first_tensor.squeeze(expanded_dim)
                if second_tensor.dim() == 4:
                    expanded_dim = _rindex(second_tensor.size(), 1)
                    second_tensor = second_tensor.squeeze(expanded_dim)
                intermediate = first_tensor * weight
                result = torch.matmul(intermediate, second_tensor.transpose(-1, -2))
                if result.dim() == desired_dim + 1:
                    result = result.squeeze(-1)
                return result
            elif operation == "/":
                if first_tensor.dim() > 4 or second_tensor.dim() > 4:
                    raise ValueError("Tensors with dim > 4 not currently supported")
                desired_dim = max(first_tensor.dim(), second_tensor.dim()) - 1
                if first_tensor.dim() == 4:
                    expanded_dim = _rindex(first_tensor.size(), 1)
                    first_tensor = first_tensor.squeeze(expanded_dim)
                if second_tensor.dim() == 4:
                    expanded_dim = _rindex(second_tensor.size(), 1)
                    second_tensor = second_tensor.squeeze(expanded_dim)
                intermediate = first_tensor * weight
                result = torch.matmul(intermediate, second_tensor.pow(-1).transpose(-1, -2))
                if result.dim() == desired_dim + 1:
                    result = result.squeeze(-1)
                return result
            elif operation == "+":
                return torch.matmul(first_tensor, weight) + torch.matmul(second_tensor, weight)
            elif operation == "-":
                return torch.matmul(first_tensor, weight) - torch.matmul(second_tensor, weight)
            else:
                raise ConfigurationError("Invalid operation: " + operation)

    def get_combined_dim(combination: str, tensor_dims: List[int]) -> int:
        if len(tensor_dims) > 9:
            raise ConfigurationError("Double-digit tensor lists not currently supported")
        combination = combination.replace("x", "1").replace("y", "2")
        return sum(_get_combination_dim(piece, tensor_dims) for piece in combination.split(","))

    def _get_combination_dim(combination: str, tensor_dims: List[int]) -> int:
        if combination.isdigit():
            index = int(combination) - 1
            return tensor_dims[index]
        else:
            if len(combination) != 3:
                raise ConfigurationError("Invalid combination: " + combination)
            first_tensor_dim = _get_combination_dim(combination[0], tensor_dims)
            second_tensor_dim = _get_combination_dim(combination[2], tensor_dims)
            operation = combination[1]
            if first_tensor_dim != second_tensor_dim:
                raise ConfigurationError('Tensor dims must match for operation "{}"'.format(operation))
            return first_tensor_dim

    def logsumexp(tensor, dim: int = -1, keepdim: bool = False):
        max_score, _ = tensor.max(dim, keepdim=keepdim)
        if keepdim:
            stable_vec = tensor - max_score
        else:
            stable_vec = tensor - max_score.unsqueeze(dim)
        return max_score + (stable_vec.exp().sum(dim, keepdim=keepdim)).log()

    def get_device_of(tensor) -> int:
        if not tensor.is_cuda:
            return -1
        else:
            return tensor.get_device()

    def flatten_and_batch_shift_indices(indices, sequence_length: int):
        # Shape: (batch_size)
        if torch.max(indices) >= sequence_length or torch.min(indices) < 0:
            raise ConfigurationError(
                f"All elements in indices should be in range (0, {sequence_length - 1})"
            )
        offsets = get_range_vector(indices.size(0), get_device_of(indices)) * sequence_length
        for _ in range(len(indices.size()) - 1):
            offsets = offsets.unsqueeze(1)

        # Shape: (batch_size, d_1, ..., d_n)
        offset_indices = indices + offsets

        # Shape: (batch_size * d_1 * ... * d_n)
        offset_indices = offset_indices.view(-1)
        return offset_indices

    def batched_index_select(target, indices, flattened_indices=None):
        if flattened_indices is None:
            # Shape: (batch_size * d_1 * ... * d_n)
            flattened_indices = flatten_and_batch_shift_indices(indices, target.size(1))

        # Shape: (batch_size * sequence_length, embedding_size)
        flattened_target = target.view(-1, target.size(-1))

        # Shape: (batch_size * d_1 * ... * d_n, embedding_size)
        flattened_selected = flattened_target.index_select(0, flattened_indices)
        selected_shape = list(indices.size()) + [target.size(-1)]
        # Shape: (batch_size, d_1, ..., d_n, embedding_size)
        selected_targets = flattened_selected.view(*selected_shape)
        return selected_targets

    def batched_span_select(target, spans):
        # both of shape (batch_size, num_spans, 1)
        span_starts, span_ends = spans.split(1, dim=-1)

        # shape (batch_size, num_spans, 1)
        # These span widths are off by 1, because the span ends are `inclusive`.
        span_widths = span_ends - span_starts

        max_batch_span_width = span_widths.max().item() + 1

        # Shape: (1, 1, max_batch_span_width)
        max_span_range_indices = get_range_vector(max_batch_span_width, get_device_of(target)).view(
            1, 1, -1
        )
        span_mask = max_span_range_indices <= span_widths
        raw_span_indices = span_starts + max_span_range_indices
        # We also don't want to include span indices which greater than sequence_length,
        # which happens because some spans near the end of the sequence
        span_mask = span_mask & (raw_span_indices < target.size(1))
        span_indices = raw_span_indices*span_mask

        # Shape: (batch_size, num_spans, max_batch_span_width, embedding_dim)
        span_embeddings = batched_index_select(target, span_indices)

        return span_embeddings, span_mask

    def flattened_index_select(target, indices):
        if indices.dim() != 2:
            raise ConfigurationError(
                "Indices passed to flattened_index_select had shape {} but "
                "only 2 dimensional inputs are supported.".format(indices.size())
            )
        # Shape: (batch_size, set_size * subset_size, embedding_size)
        flattened_selected = target.index_select(1, indices.view(-1))

        # Shape: (batch_size, set_size, subset_size, embedding_size)
        selected = flattened_selected.view(target.size(0), indices.size(0), indices.size(1), -1)
        return selected

    def get_range_vector(size: int, device: int):
        if device > -1:
            return torch.cuda.LongTensor(size, device=device).fill_(1).cumsum(0) - 1
        else:
            return torch.arange(0, size, dtype=torch.long)

    def bucket_values(distances, num_identity_buckets: int = 4, num_total_buckets: int = 10):
        logspace_index = (distances.float().log() / math.log(2)).floor().long() + (
            num_identity_buckets - 1
        )
        # create a mask for values which will go into single number buckets (i.e not a range).
        use_identity_mask = (distances <= num_identity_buckets).long()
        use_buckets_mask = 1 + (-1 * use_identity_mask)
        # Use the original values if they are less than num_identity_buckets, otherwise
        # use the logspace indices.
        combined_index = use_identity_mask * distances + use_buckets_mask * logspace_index
        # Clamp to put anything > num_total_buckets into the final bucket.
        return combined_index.clamp(0, num_total_buckets - 1)

    def add_sentence_boundary_token_ids(tensor, mask, sentence_begin_token: Any, sentence_end_token: Any):
        # TODO: matthewp, profile this transfer
        sequence_lengths = mask.sum(dim=1).detach().cpu().numpy()
        tensor_shape = list(tensor.data.shape)
        new_shape = list(tensor_shape)
        new_shape[1] = tensor_shape[1] + 2
        tensor_with_boundary_tokens = tensor.new_zeros(*new_shape)
        if len(tensor_shape) == 2:
            tensor_with_boundary_tokens[:, 1:-1] = tensor
            tensor_with_boundary_tokens[:, 0] = sentence_begin_token
            for i, j in enumerate(sequence_lengths):
                tensor_with_boundary_tokens[i, j + 1] = sentence_end_token
            new_mask = tensor_with_boundary_tokens != 0
        elif len(tensor_shape) == 3:
            tensor_with_boundary_tokens[:, 1:-1, :] = tensor
            for i, j in enumerate(sequence_lengths):
                tensor_with_boundary_tokens[i, 0, :] = sentence_begin_token
                tensor_with_boundary_tokens[i, j + 1, :] = sentence_end_token
            new_mask = (tensor_with_boundary_tokens > 0).sum(dim=-1) > 0
        else:
            raise ValueError("add_sentence_boundary_token_ids only accepts 2D and 3D input")

        return tensor_with_boundary_tokens, new_mask

    def remove_sentence_boundaries(tensor, mask):
        # TODO: matthewp, profile this transfer
        sequence_lengths = mask.sum(dim=1).detach().cpu().numpy()
        tensor_shape = list(tensor.data.shape)
        new_shape = list(tensor_shape)
        new_shape[1] = tensor_shape[1] - 2
        tensor_without_boundary_tokens = tensor.new_zeros(*new_shape)
        new_mask = tensor.new_zeros((new_shape[0], new_shape[1]), dtype=torch.bool)
        for i, j in enumerate(sequence_lengths):
            if j > 2:
                tensor_without_boundary_tokens[i, : (j - 2), :] = tensor[i, 1 : (j - 1), :]
                new_mask[i, : (j - 2)] = True

        return tensor_without_boundary_tokens, new_mask

    def add_positional_features(tensor, min_timescale: float = 1.0, max_timescale: float = 1.0e4):
        _, timesteps, hidden_dim = tensor.size()

        timestep_range = get_range_vector(timesteps, get_device_of(tensor)).data.float()
        # We're generating both cos and sin frequencies,
        # so half for each.
        num_timescales = hidden_dim // 2
        timescale_range = get_range_vector(num_timescales, get_device_of(tensor)).data.float()

        log_timescale_increments = math.log(float(max_timescale) / float(min_timescale)) / float(
            num_timescales - 1
        )
        inverse_timescales = min_timescale * torch.exp(timescale_range * -log_timescale_increments)

        # Broadcasted multiplication - shape (timesteps, num_timescales)
        scaled_time = timestep_range.unsqueeze(1) * inverse_timescales.unsqueeze(0)
        # shape (timesteps, 2 * num_timescales)
        sinusoids = torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], 1)
        if hidden_dim % 2 != 0:
            sinusoids = torch.cat([sinusoids, sinusoids.new_zeros(timesteps, 1)], 1)
        return tensor + sinusoids.unsqueeze(0)

    def masked_topk(input_, mask, k, dim: int = -1):
        if input_.size() != mask.size():
            raise ValueError("`input_` and `mask` must have the same shape.")
        if not -input_.dim() <= dim < input_.dim():
            raise ValueError("`dim` must be in `[-input_.dim(), input_.dim())`")
        dim = (dim + input_.dim()) % input_.dim()

        max_k = k if isinstance(k, int) else k.max()

        permutation = list(range(input_.dim()))
        permutation.pop(dim)
        permutation += [dim]

        reverse_permutation = list(range(input_.dim() - 1))
        reverse_permutation.insert(dim, -1)

        other_dims_size = list(input_.size())
        other_dims_size.pop(dim)
        permuted_size = other_dims_size + [max_k]  # for restoration

        if isinstance(k, int):
            # Put the tensor on same device as the mask.
            k = k * torch.ones(*other_dims_size, dtype=torch.long, device=mask.device)
        else:
            if list(k.size()) != other_dims_size:
                raise ValueError(
                    "`k` must have the same shape as `input_` with dimension `dim` removed."
                )

        num_items = input_.size(dim)
        # (batch_size, num_items)  -- "batch_size" refers to all other dimensions stacked together
        input_ = input_.permute(*permutation).reshape(-1, num_items)
        mask = mask.permute(*permutation).reshape(-1, num_items)
        k = k.reshape(-1)

        input_ = replace_masked_values(input_, mask, min_value_of_dtype(input_.dtype))

        # Shape: (batch_size, max_k)
        _, top_indices = input_.topk(max_k, 1)

        # Shape: (batch_size, max_k)
        top_indices_mask = get_mask_from_sequence_lengths(k, max_k).bool()

        # Shape: (batch_size, 1)
        fill_value, _ = top_indices.max(dim=1, keepdim=True)
        # Shape: (batch_size, max_num_items_to_keep)
        top_indices = torch.where(top_indices_mask, top_indices, fill_value)

        top_indices, _ = top_indices.sort(1)

        # Shape: (batch_size, max_k)
        sequence_mask = mask.gather(1, top_indices)
        top_mask = top_indices_mask & sequence_mask

        # Shape: (batch_size, max_k)
        top_input = input_.gather(1, top_indices)

        return (
            top_input.reshape(*permuted_size).permute(*reverse_permutation),
            top_mask.reshape(*permuted_size).permute(*reverse_permutation),
            top_indices.reshape(*permuted_size).permute(*reverse_permutation),
        )

    def info_value_of_dtype(dtype):
        if dtype == torch.bool:
            raise TypeError("Does not support torch.bool")
        elif dtype.is_floating_point:
            return torch.finfo(dtype)
        else:
            return torch.iinfo(dtype)

    def min_value_of_dtype(dtype):
        return info_value_of_dtype(dtype).min

    def max_value_of_dtype(dtype):
        return info_value_of_dtype(dtype).max

    def tiny_value_of_dtype(dtype):
        if not dtype.is_floating_point:
            raise TypeError("Only supports floating point dtypes.")
        if dtype == torch.float or dtype == torch.double:
            return 1e-13
        elif dtype == torch.half:
            return 1e-4
        else:
            raise TypeError("Does not support dtype " + str(dtype))

    # ---------------------------------------------------------- allennlp/nn/initializers.py
    def block_orthogonal(tensor, split_sizes: List[int], gain: float = 1.0) -> None:
        data = tensor.data
        sizes = list(tensor.size())
        if any(a % b != 0 for a, b in zip(sizes, split_sizes)):
            raise ConfigurationError(
                "tensor dimensions must be divisible by their respective "
                "split_sizes. Found size: {} and split_sizes: {}".format(sizes, split_sizes)
            )
        indexes = [list(range(0, max_size, split)) for max_size, split in zip(sizes, split_sizes)]
        # Iterate over all possible blocks within the tensor.
        for block_start_indices in itertools.product(*indexes):
            index_and_step_tuples = zip(block_start_indices, split_sizes)
            block_slice = tuple(
                slice(start_index, start_index + step) for start_index, step in index_and_step_tuples
            )
            data[block_slice] = torch.nn.init.orthogonal_(tensor[block_slice].contiguous(), gain=gain)

    util = SimpleNamespace(**{k: v for k, v in locals().items() if callable(v) and not isinstance(v, type)})

    # ------------------------------------------------ allennlp/modules/conditional_random_field.py
    def allowed_transitions(constraint_type: str, labels: Dict[int, str]) -> List[Tuple[int, int]]:
        num_labels = len(labels)
        start_tag = num_labels
        end_tag = num_labels + 1
        labels_with_boundaries = list(labels.items()) + [(start_tag, "START"), (end_tag, "END")]

        allowed = []
        for from_label_index, from_label in labels_with_boundaries:
            if from_label in ("START", "END"):
                from_tag = from_label
                from_entity = ""
            else:
                from_tag = from_label[0]
                from_entity = from_label[1:]
            for to_label_index, to_label in labels_with_boundaries:
                if to_label in ("START", "END"):
                    to_tag = to_label
                    to_entity = ""
                else:
                    to_tag = to_label[0]
                    to_entity = to_label[1:]
                if is_transition_allowed(constraint_type, from_tag, from_entity, to_tag, to_entity):
                    allowed.append((from_label_index, to_label_index))
        return allowed

    def is_transition_allowed(constraint_type: str, from_tag: str, from_entity: str, to_tag: str, to_entity: str):
        if to_tag == "START" or from_tag == "END":
            # Cannot transition into START or from END
            return False

        if constraint_type == "BIOUL":
            if from_tag == "START":
                return to_tag in ("O", "B", "U")
            if to_tag == "END":
                return from_tag in ("O", "L", "U")
            return any(
                [
                    from_tag in ("O", "L", "U") and to_tag in ("O", "B", "U"),
                    from_tag in ("B", "I") and to_tag in ("I", "L") and from_entity == to_entity,
                ]
            )
        elif constraint_type == "BIO":
            if from_tag == "START":
                return to_tag in ("O", "B")
            if to_tag == "END":
                return from_tag in ("O", "B", "I")
            return any(
                [
                    # Can always transition to O or B-x
                    to_tag in ("O", "B"),
                    # Can only transition to I-x from B-x or I-x
                    to_tag == "I" and from_tag in ("B", "I") and from_entity == to_entity,
                ]
            )
        elif constraint_type == "IOB1":
            if from_tag == "START":
                return to_tag in ("O", "I")
            if to_tag == "END":
                return from_tag in ("O", "B", "I")
            return any(
                [
                    to_tag in ("O", "I"),
                    to_tag == "B" and from_tag in ("B", "I") and from_entity == to_entity,
                ]
            )
        elif constraint_type == "BMES":
            if from_tag == "START":
                return to_tag in ("B", "S")
            if to_tag == "END":
                return from_tag in ("E", "S")
            return any(
                [
                    to_tag in ("B", "S") and from_tag in ("E", "S"),
                    to_tag == "M" and from_tag in ("B", "M") and from_entity == to_entity,
                    to_tag == "E" and from_tag in ("B", "M") and from_entity == to_entity,
                ]
            )
        else:
            raise ConfigurationError(f"Unknown constraint type: {constraint_type}")

    class ConditionalRandomField(torch.nn.Module):
        def __init__(
            self,
            num_tags: int,
            constraints: List[Tuple[int, int]] = None,
            include_start_end_transitions: bool = True,
        ) -> None:
            super().__init__()
            self.num_tags = num_tags

            # transitions[i, j] is the logit for transitioning from state i to state j.
            self.transitions = torch.nn.Parameter(torch.Tensor(num_tags, num_tags))

            # _constraint_mask indicates valid transitions (based on supplied constraints).
            # Include special start of sequence (num_tags + 1) and end of sequence tags (num_tags + 2)
            if constraints is None:
                # All transitions are valid.
                constraint_mask = torch.Tensor(num_tags + 2, num_tags + 2).fill_(1.0)
            else:
                constraint_mask = torch.Tensor(num_tags + 2, num_tags + 2).fill_(0.0)
                for i, j in constraints:
                    constraint_mask[i, j] = 1.0

            self._constraint_mask = torch.nn.Parameter(constraint_mask, requires_grad=False)

            # Also need logits for transitioning from "start" state and to "end" state.
            self.include_start_end_transitions = include_start_end_transitions
            if include_start_end_transitions:
                self.start_transitions = torch.nn.Parameter(torch.Tensor(num_tags))
                self.end_transitions = torch.nn.Parameter(torch.Tensor(num_tags))

            self.reset_parameters()

        def reset_parameters(self):
            torch.nn.init.xavier_normal_(self.transitions)
            if self.include_start_end_transitions:
                torch.nn.init.normal_(self.start_transitions)
                torch.nn.init.normal_(self.end_transitions)

        def _input_likelihood(self, logits, mask):
            batch_size, sequence_length, num_tags = logits.size()

            # Transpose batch size and sequence dimensions
            mask = mask.transpose(0, 1).contiguous()
            logits = logits.transpose(0, 1).contiguous()

            if self.include_start_end_transitions:
                alpha = self.start_transitions.view(1, num_tags) + logits[0]
            else:
                alpha = logits[0]

            for i in range(1, sequence_length):
                # The emit scores are for time i ("next_tag") so we broadcast along the current_tag axis.
                emit_scores = logits[i].view(batch_size, 1, num_tags)
                # Transition scores are (current_tag, next_tag) so we broadcast along the instance axis.
                transition_scores = self.transitions.view(1, num_tags, num_tags)
                # Alpha is for the current_tag, so we broadcast along the next_tag axis.
                broadcast_alpha = alpha.view(batch_size, num_tags, 1)

                # Add all the scores together and logexp over the current_tag axis.
                inner = broadcast_alpha + emit_scores + transition_scores

                alpha = util.logsumexp(inner, 1) * mask[i].view(batch_size, 1) + alpha * (
                    ~mask[i]
                ).view(batch_size, 1)

            # Every sequence needs to end with a transition to the stop_tag.
            if self.include_start_end_transitions:
                stops = alpha + self.end_transitions.view(1, num_tags)
            else:
                stops = alpha

            # Finally we log_sum_exp along the num_tags dim, result is (batch_size,)
            return util.logsumexp(stops)

        def _joint_likelihood(self, logits, tags, mask):
            batch_size, sequence_length, _ = logits.data.shape

            # Transpose batch size and sequence dimensions:
            logits = logits.transpose(0, 1).contiguous()
            mask = mask.transpose(0, 1).contiguous()
            tags = tags.transpose(0, 1).contiguous()

            # Start with the transition scores from start_tag to the first tag in each input
            if self.include_start_end_transitions:
                score = self.start_transitions.index_select(0, tags[0])
            else:
                score = 0.0

            # Add up the scores for the observed transitions and all the inputs but the last
            for i in range(sequence_length - 1):
                # Each is shape (batch_size,)
                current_tag, next_tag = tags[i], tags[i + 1]

                # The scores for transitioning from current_tag to next_tag
                transition_score = self.transitions[current_tag.view(-1), next_tag.view(-1)]

                # The score for using current_tag
                emit_score = logits[i].gather(1, current_tag.view(batch_size, 1)).squeeze(1)

                # Include transition score if next element is unmasked,
                # input_score if this element is unmasked.
                score = score + transition_score * mask[i + 1] + emit_score * mask[i]

            # Transition from last state to "stop" state. To start with, we need to find the last tag
            # for each instance.
            last_tag_index = mask.sum(0).long() - 1
            last_tags = tags.gather(0, last_tag_index.view(1, batch_size)).squeeze(0)

            # Compute score of transitioning to `stop_tag` from each "last tag".
            if self.include_start_end_transitions:
                last_transition_score = self.end_transitions.index_select(0, last_tags)
            else:
                last_transition_score = 0.0

            # Add the last input if it's not masked.
            last_inputs = logits[-1]  # (batch_size, num_tags)
            last_input_score = last_inputs.gather(1, last_tags.view(-1, 1))  # (batch_size, 1)
            last_input_score = last_input_score.squeeze()  # (batch_size,)

            score = score + last_transition_score + last_input_score * mask[-1]

            return score

        def forward(self, inputs, tags, mask=None):
            if mask is None:
                mask = torch.ones(*tags.size(), dtype=torch.bool)
            else:
                # The code below fails in weird ways if this isn't a bool tensor, so we make sure.
                mask = mask.to(torch.bool)

            log_denominator = self._input_likelihood(inputs, mask)
            log_numerator = self._joint_likelihood(inputs, tags, mask)

            return torch.sum(log_numerator - log_denominator)

        def viterbi_tags(self, logits, mask=None, top_k: int = None):
            if mask is None:
                mask = torch.ones(*logits.shape[:2], dtype=torch.bool, device=logits.device)

            if top_k is None:
                top_k = 1
                flatten_output = True
            else:
                flatten_output = False

            _, max_seq_length, num_tags = logits.size()

            # Get the tensors out of the variables
            logits, mask = logits.data, mask.data

            # Augment transitions matrix with start and end transitions
            start_tag = num_tags
            end_tag = num_tags + 1
            transitions = torch.Tensor(num_tags + 2, num_tags + 2).fill_(-10000.0)

            # Apply transition constraints
            constrained_transitions = self.transitions * self._constraint_mask[
                :num_tags, :num_tags
            ] + -10000.0 * (1 - self._constraint_mask[:num_tags, :num_tags])
            transitions[:num_tags, :num_tags] = constrained_transitions.data

            if self.include_start_end_transitions:
                transitions[
                    start_tag, :num_tags
                ] = self.start_transitions.detach() * self._constraint_mask[
                    start_tag, :num_tags
                ].data + -10000.0 * (
                    1 - self._constraint_mask[start_tag, :num_tags].detach()
                )
                transitions[:num_tags, end_tag] = self.end_transitions.detach() * self._constraint_mask[
                    :num_tags, end_tag
                ].data + -10000.0 * (1 - self._constraint_mask[:num_tags, end_tag].detach())
            else:
                transitions[start_tag, :num_tags] = -10000.0 * (
                    1 - self._constraint_mask[start_tag, :num_tags].detach()
                )
                transitions[:num_tags, end_tag] = -10000.0 * (
                    1 - self._constraint_mask[:num_tags, end_tag].detach()
                )

            best_paths = []
            # Pad the max sequence length by 2 to account for start_tag + end_tag.
            tag_sequence = torch.Tensor(max_seq_length + 2, num_tags + 2)

            for prediction, prediction_mask in zip(logits, mask):
                mask_indices = prediction_mask.nonzero(as_tuple=False).squeeze()
                masked_prediction = torch.index_select(prediction, 0, mask_indices)
                sequence_length = masked_prediction.shape[0]

                # Start with everything totally unlikely
                tag_sequence.fill_(-10000.0)
                # At timestep 0 we must have the START_TAG
                tag_sequence[0, start_tag] = 0.0
                # At steps 1, ..., sequence_length we just use the incoming prediction
                tag_sequence[1 : (sequence_length + 1), :num_tags] = masked_prediction
                # And at the last timestep we must have the END_TAG
                tag_sequence[sequence_length + 1, end_tag] = 0.0

                # We pass the tags and the transitions to `viterbi_decode`.
                viterbi_paths, viterbi_scores = util.viterbi_decode(
                    tag_sequence=tag_sequence[: (sequence_length + 2)],
                    transition_matrix=transitions,
                    top_k=top_k,
                )
                top_k_paths = []
                for viterbi_path, viterbi_score in zip(viterbi_paths, viterbi_scores):
                    # Get rid of START and END sentinels and append.
                    viterbi_path = viterbi_path[1:-1]
                    top_k_paths.append((viterbi_path, viterbi_score.item()))
                best_paths.append(top_k_paths)

            if flatten_output:
                return [top_k_paths[0] for top_k_paths in best_paths]

            return best_paths

    # ------------------------------------------------------------- allennlp/modules/scalar_mix.py
    ParameterList, Parameter = torch.nn.ParameterList, torch.nn.Parameter

    class ScalarMix(torch.nn.Module):
        def __init__(self, mixture_size: int, do_layer_norm: bool = False,
                     initial_scalar_parameters: List[float] = None, trainable: bool = True) -> None:
            super().__init__()
            self.mixture_size = mixture_size
            self.do_layer_norm = do_layer_norm

            if initial_scalar_parameters is None:
                initial_scalar_parameters = [0.0] * mixture_size
            elif len(initial_scalar_parameters) != mixture_size:
                raise ConfigurationError(
                    "Length of initial_scalar_parameters {} differs "
                    "from mixture_size {}".format(initial_scalar_parameters, mixture_size)
                )

            self.scalar_parameters = ParameterList(
                [
                    Parameter(
                        torch.FloatTensor([initial_scalar_parameters[i]]), requires_grad=trainable
                    )
                    for i in range(mixture_size)
                ]
            )
            self.gamma = Parameter(torch.FloatTensor([1.0]), requires_grad=trainable)

        def forward(self, tensors, mask=None):
            if len(tensors) != self.mixture_size:
                raise ConfigurationError(
                    "{} tensors were passed, but the module was initialized to "
                    "mix {} tensors.".format(len(tensors), self.mixture_size)
                )

            def _do_layer_norm(tensor, broadcast_mask, num_elements_not_masked):
                tensor_masked = tensor * broadcast_mask
                mean = torch.sum(tensor_masked) / num_elements_not_masked
                variance = (
                    torch.sum(((tensor_masked - mean) * broadcast_mask) ** 2) / num_elements_not_masked
                )
                return (tensor - mean) / torch.sqrt(variance + 1e-12)

            normed_weights = torch.nn.functional.softmax(
                torch.cat([parameter for parameter in self.scalar_parameters]), dim=0
            )
            normed_weights = torch.split(normed_weights, split_size_or_sections=1)

            if not self.do_layer_norm:
                pieces = []
                for weight, tensor in zip(normed_weights, tensors):
                    pieces.append(weight * tensor)
                return self.gamma * sum(pieces)

            else:
                mask_float = mask.float()
                broadcast_mask = mask_float.unsqueeze(-1)
                input_dim = tensors[0].size(-1)
                num_elements_not_masked = torch.sum(mask_float) * input_dim

                pieces = []
                for weight, tensor in zip(normed_weights, tensors):
                    pieces.append(
                        weight * _do_layer_norm(tensor, broadcast_mask, num_elements_not_masked)
                    )
                return self.gamma * sum(pieces)

    # ----------------------------------------------------------------- allennlp/modules/highway.py
    class Highway(torch.nn.Module):
        def __init__(self, input_dim: int, num_layers: int = 1,
                     activation=torch.nn.functional.relu) -> None:
            super().__init__()
            self._input_dim = input_dim
            self._layers = torch.nn.ModuleList(
                [torch.nn.Linear(input_dim, input_dim * 2) for _ in range(num_layers)]
            )
            self._activation = activation
            for layer in self._layers:
                layer.bias[input_dim:].data.fill_(1)

        def forward(self, inputs):
            current_input = inputs
            for layer in self._layers:
                projected_input = layer(current_input)
                linear_part = current_input
                nonlinear_part, gate = projected_input.chunk(2, dim=-1)
                nonlinear_part = self._activation(nonlinear_part)
                gate = torch.sigmoid(gate)
                current_input = gate * linear_part + (1 - gate) * nonlinear_part
            return current_input

    # -------------------------------------------------------- allennlp/modules/time_distributed.py
    def squash(tensor):
        """Combine the first two dimensions into one dimension"""
        input_size = tensor.size()
        if len(input_size) <= 2:
            raise RuntimeError(f"No dimension to distribute: {input_size}")
        squashed_shape = [-1] + [x for x in input_size[2:]]
        return tensor.contiguous().view(*squashed_shape)

    def unsquash(tensor, dim1: int, dim2: int):
        """Spread the first dimension into two dimensions"""
        new_shape = [dim1, dim2] + [dim for dim in tensor.size()[1:]]
        return tensor.contiguous().view(*new_shape)

    class TimeDistributed(torch.nn.Module):
        def __init__(self, module):
            super(TimeDistributed, self).__init__()
            self._module = module

        def forward(self, *inputs):
            reshaped_inputs = []
            for input_tensor in inputs:
                squashed_tensor = squash(input_tensor)
                reshaped_inputs.append(squashed_tensor)

            reshaped_outputs = self._module(*reshaped_inputs)

            # Now get the output back into the right shape.
            # (batch_size, time_steps, [hidden_size])
            batch_size, time_steps, *_ = inputs[0].size()
            outputs = unsquash(reshaped_outputs, batch_size, time_steps)

            return outputs

    # ------------------------------------------------------------ allennlp/modules/span_extractors
    class SpanExtractorWithSpanWidthEmbedding(torch.nn.Module):
        def __init__(self, input_dim: int, num_width_embeddings: int = None,
                     span_width_embedding_dim: int = None, bucket_widths: bool = False) -> None:
            super().__init__()
            self._input_dim = input_dim
            self._num_width_embeddings = num_width_embeddings
            self._bucket_widths = bucket_widths

            self._span_width_embedding = None
            if num_width_embeddings is not None and span_width_embedding_dim is not None:
                self._span_width_embedding = torch.nn.Embedding(
                    num_embeddings=num_width_embeddings, embedding_dim=span_width_embedding_dim
                )
            elif num_width_embeddings is not None or span_width_embedding_dim is not None:
                raise ConfigurationError(
                    "To use a span width embedding representation, you must"
                    "specify both num_width_embeddings and span_width_embedding_dim."
                )

        def forward(self, sequence_tensor, span_indices, sequence_mask=None, span_indices_mask=None):
            # shape (batch_size, num_spans, embedding_dim)
            span_embeddings = self._embed_spans(
                sequence_tensor, span_indices, sequence_mask, span_indices_mask
            )
            if self._span_width_embedding is not None:
                # shape (batch_size, num_spans)
                widths_minus_one = span_indices[..., 1] - span_indices[..., 0]

                if self._bucket_widths:
                    widths_minus_one = util.bucket_values(
                        widths_minus_one, num_total_buckets=self._num_width_embeddings  # type: ignore
                    )

                # Embed the span widths and concatenate to the rest of the representations.
                span_width_embeddings = self._span_width_embedding(widths_minus_one)
                span_embeddings = torch.cat([span_embeddings, span_width_embeddings], -1)

            if span_indices_mask is not None:
                # Here we are masking the spans which were originally passed in as padding.
                return span_embeddings * span_indices_mask.unsqueeze(-1)

            return span_embeddings

        def get_input_dim(self) -> int:
            return self._input_dim

    class EndpointSpanExtractor(SpanExtractorWithSpanWidthEmbedding):
        def __init__(self, input_dim: int, combination: str = "x,y", num_width_embeddings: int = None,
                     span_width_embedding_dim: int = None, bucket_widths: bool = False,
                     use_exclusive_start_indices: bool = False) -> None:
            super().__init__(
                input_dim=input_dim,
                num_width_embeddings=num_width_embeddings,
                span_width_embedding_dim=span_width_embedding_dim,
                bucket_widths=bucket_widths,
            )
            self._combination = combination

            self._use_exclusive_start_indices = use_exclusive_start_indices
            if use_exclusive_start_indices:
                self._start_sentinel = Parameter(torch.randn([1, 1, int(input_dim)]))

        def get_output_dim(self) -> int:
            combined_dim = util.get_combined_dim(self._combination, [self._input_dim, self._input_dim])
            if self._span_width_embedding is not None:
                return combined_dim + self._span_width_embedding.embedding_dim
            return combined_dim

        def _embed_spans(self, sequence_tensor, span_indices, sequence_mask=None, span_indices_mask=None):
            # shape (batch_size, num_spans)
            span_starts, span_ends = [index.squeeze(-1) for index in span_indices.split(1, dim=-1)]

            if span_indices_mask is not None:
                span_starts = span_starts * span_indices_mask
                span_ends = span_ends * span_indices_mask

            if not self._use_exclusive_start_indices:
                if sequence_tensor.size(-1) != self._input_dim:
                    raise ValueError(
                        f"Dimension mismatch expected ({sequence_tensor.size(-1)}) "
                        f"received ({self._input_dim})."
                    )
                start_embeddings = util.batched_index_select(sequence_tensor, span_starts)
                end_embeddings = util.batched_index_select(sequence_tensor, span_ends)

            else:
                # shape (batch_size, num_spans)
                exclusive_span_starts = span_starts - 1
                # shape (batch_size, num_spans, 1)
                start_sentinel_mask = (exclusive_span_starts == -1).unsqueeze(-1)
                exclusive_span_starts = exclusive_span_starts * ~start_sentinel_mask.squeeze(-1)

                if (exclusive_span_starts < 0).any():
                    raise ValueError(
                        f"Adjusted span indices must lie inside the the sequence tensor, "
                        f"but found: exclusive_span_starts: {exclusive_span_starts}."
                    )

                start_embeddings = util.batched_index_select(sequence_tensor, exclusive_span_starts)
                end_embeddings = util.batched_index_select(sequence_tensor, span_ends)

                start_embeddings = (
                    start_embeddings * ~start_sentinel_mask + start_sentinel_mask * self._start_sentinel
                )

            combined_tensors = util.combine_tensors(
                self._combination, [start_embeddings, end_embeddings]
            )

            return combined_tensors

    class SelfAttentiveSpanExtractor(torch.nn.Module):
        def __init__(self, input_dim: int) -> None:
            super().__init__()
            self._input_dim = input_dim
            self._global_attention = TimeDistributed(torch.nn.Linear(input_dim, 1))

        def forward(self, sequence_tensor, span_indices, span_indices_mask=None):
            # shape (batch_size, sequence_length, 1)
            global_attention_logits = self._global_attention(sequence_tensor)

            # shape (batch_size, sequence_length, embedding_dim + 1)
            concat_tensor = torch.cat([sequence_tensor, global_attention_logits], -1)

            concat_output, span_mask = util.batched_span_select(concat_tensor, span_indices)

            # Shape: (batch_size, num_spans, max_batch_span_width, embedding_dim)
            span_embeddings = concat_output[:, :, :, :-1]
            # Shape: (batch_size, num_spans, max_batch_span_width)
            span_attention_logits = concat_output[:, :, :, -1]

            # Shape: (batch_size, num_spans, max_batch_span_width)
            span_attention_weights = util.masked_softmax(span_attention_logits, span_mask)

            # Shape: (batch_size, num_spans, embedding_dim)
            attended_text_embeddings = util.weighted_sum(span_embeddings, span_attention_weights)

            if span_indices_mask is not None:
                return attended_text_embeddings * span_indices_mask.unsqueeze(-1)

            return attended_text_embeddings

    # ---------------------------------------------------------- allennlp/modules/matrix_attention
    class LinearMatrixAttention(torch.nn.Module):
        def __init__(self, tensor_1_dim: int, tensor_2_dim: int, combination: str = "x,y",
                     activation=None) -> None:
            super().__init__()
            self._combination = combination
            combined_dim = util.get_combined_dim(combination, [tensor_1_dim, tensor_2_dim])
            self._weight_vector = Parameter(torch.Tensor(combined_dim))
            self._bias = Parameter(torch.Tensor(1))
            self._activation = activation or (lambda x: x)
            self.reset_parameters()

        def reset_parameters(self):
            std = math.sqrt(6 / (self._weight_vector.size(0) + 1))
            self._weight_vector.data.uniform_(-std, std)
            self._bias.data.fill_(0)

        def forward(self, matrix_1, matrix_2):
            combined_tensors = util.combine_tensors_and_multiply(
                self._combination, [matrix_1.unsqueeze(2), matrix_2.unsqueeze(1)], self._weight_vector
            )
            return self._activation(combined_tensors + self._bias)

    class BilinearMatrixAttention(torch.nn.Module):
        def __init__(self, matrix_1_dim: int, matrix_2_dim: int, activation=None,
                     use_input_biases: bool = False, label_dim: int = 1) -> None:
            super().__init__()
            if use_input_biases:
                matrix_1_dim += 1
                matrix_2_dim += 1

            if label_dim == 1:
                self._weight_matrix = Parameter(torch.Tensor(matrix_1_dim, matrix_2_dim))
            else:
                self._weight_matrix = Parameter(torch.Tensor(label_dim, matrix_1_dim, matrix_2_dim))

            self._bias = Parameter(torch.Tensor(1))
            self._activation = activation or (lambda x: x)
            self._use_input_biases = use_input_biases
            self.reset_parameters()

        def reset_parameters(self):
            torch.nn.init.xavier_uniform_(self._weight_matrix)
            self._bias.data.fill_(0)

        def forward(self, matrix_1, matrix_2):

            if self._use_input_biases:
                bias1 = matrix_1.new_ones(matrix_1.size()[:-1] + (1,))
                bias2 = matrix_2.new_ones(matrix_2.size()[:-1] + (1,))

                matrix_1 = torch.cat([matrix_1, bias1], -1)
                matrix_2 = torch.cat([matrix_2, bias2], -1)

            weight = self._weight_matrix
            if weight.dim() == 2:
                weight = weight.unsqueeze(0)
            intermediate = torch.matmul(matrix_1.unsqueeze(1), weight)
            final = torch.matmul(intermediate, matrix_2.unsqueeze(1).transpose(2, 3))
            return self._activation(final.squeeze(1) + self._bias)

    class CosineMatrixAttention(torch.nn.Module):
        def forward(self, matrix_1, matrix_2):
            a_norm = matrix_1 / (
                matrix_1.norm(p=2, dim=-1, keepdim=True) + util.tiny_value_of_dtype(matrix_1.dtype)
            )
            b_norm = matrix_2 / (
                matrix_2.norm(p=2, dim=-1, keepdim=True) + util.tiny_value_of_dtype(matrix_2.dtype)
            )
            return torch.bmm(a_norm, b_norm.transpose(-1, -2))

    # ---------------------------------------------------------- allennlp/modules/seq2vec_encoders
    Conv1d, Linear = torch.nn.Conv1d, torch.nn.Linear

    class CnnEncoder(torch.nn.Module):
        def __init__(self, embedding_dim: int, num_filters: int, ngram_filter_sizes=(2, 3, 4, 5),
                     conv_layer_activation=None, output_dim=None) -> None:
            super().__init__()
            self._embedding_dim = embedding_dim
            self._num_filters = num_filters
            self._ngram_filter_sizes = ngram_filter_sizes
            self._activation = conv_layer_activation or torch.nn.ReLU()

            self._convolution_layers = [
                Conv1d(
                    in_channels=self._embedding_dim,
                    out_channels=self._num_filters,
                    kernel_size=ngram_size,
                )
                for ngram_size in self._ngram_filter_sizes
            ]
            for i, conv_layer in enumerate(self._convolution_layers):
                self.add_module("conv_layer_%d" % i, conv_layer)

            maxpool_output_dim = self._num_filters * len(self._ngram_filter_sizes)
            if output_dim:
                self.projection_layer = Linear(maxpool_output_dim, output_dim)
                self._output_dim = output_dim
            else:
                self.projection_layer = None
                self._output_dim = maxpool_output_dim

        def forward(self, tokens, mask):
            if mask is not None:
                tokens = tokens * mask.unsqueeze(-1)
            else:
                # If mask doesn't exist create one of shape (batch_size, num_tokens)
                mask = torch.ones(tokens.shape[0], tokens.shape[1], device=tokens.device).bool()

            tokens = torch.transpose(tokens, 1, 2)
            filter_outputs = []
            batch_size = tokens.shape[0]
            # shape: (batch_size, 1)
            last_unmasked_tokens = mask.sum(dim=1).unsqueeze(dim=-1)
            for i in range(len(self._convolution_layers)):
                convolution_layer = getattr(self, "conv_layer_{}".format(i))
                pool_length = tokens.shape[2] - convolution_layer.kernel_size[0] + 1

                # Forward pass of the convolutions.
                # shape: (batch_size, num_filters, pool_length)
                activations = self._activation(convolution_layer(tokens))

                # Create activation mask.
                # shape: (batch_size, pool_length)
                indices = (
                    torch.arange(pool_length, device=activations.device)
                    .unsqueeze(0)
                    .expand(batch_size, pool_length)
                )
                # shape: (batch_size, pool_length)
                activations_mask = indices.ge(
                    last_unmasked_tokens - convolution_layer.kernel_size[0] + 1
                )
                # shape: (batch_size, num_filters, pool_length)
                activations_mask = activations_mask.unsqueeze(1).expand_as(activations)

                # Replace masked out values with smallest possible value of the dtype so
                # that max pooling will ignore these activations.
                # shape: (batch_size, pool_length)
                activations = activations + (activations_mask * util.min_value_of_dtype(activations.dtype))

                # Pick out the max filters
                filter_outputs.append(activations.max(dim=2)[0])

            maxpool_output = (
                torch.cat(filter_outputs, dim=1) if len(filter_outputs) > 1 else filter_outputs[0]
            )

            # Replace the maxpool activations that picked up the masks with 0s
            maxpool_output[maxpool_output == util.min_value_of_dtype(maxpool_output.dtype)] = 0.0

            if self.projection_layer:
                result = self.projection_layer(maxpool_output)
            else:
                result = maxpool_output
            return result

    class BagOfEmbeddingsEncoder(torch.nn.Module):
        def __init__(self, embedding_dim: int, averaged: bool = False) -> None:
            super().__init__()
            self._embedding_dim = embedding_dim
            self._averaged = averaged

        def forward(self, tokens, mask=None):
            if mask is not None:
                tokens = tokens * mask.unsqueeze(-1)

            summed = tokens.sum(1)

            if self._averaged:
                if mask is not None:
                    lengths = util.get_lengths_from_binary_sequence_mask(mask)
                    length_mask = lengths > 0

                    # Set any length 0 to 1, to avoid dividing by zero.
                    lengths = torch.max(lengths, lengths.new_ones(1))
                else:
                    lengths = tokens.new_full((1,), fill_value=tokens.size(1))
                    length_mask = None

                summed = summed / lengths.unsqueeze(-1).float()

                if length_mask is not None:
                    summed = summed * (length_mask > 0).unsqueeze(-1)

            return summed

    # ------------------------------------------------------- allennlp/modules/masked_layer_norm.py
    class MaskedLayerNorm(torch.nn.Module):
        def __init__(self, size: int, gamma0: float = 0.1) -> None:
            super().__init__()
            self.gamma = torch.nn.Parameter(torch.ones(1, 1, size) * gamma0)
            self.beta = torch.nn.Parameter(torch.zeros(1, 1, size))
            self.size = size

        def forward(self, tensor, mask):

            broadcast_mask = mask.unsqueeze(-1)
            num_elements = broadcast_mask.sum() * self.size
            mean = (tensor * broadcast_mask).sum() / num_elements
            masked_centered = (tensor - mean) * broadcast_mask
            std = torch.sqrt(
                (masked_centered * masked_centered).sum() / num_elements
                + util.tiny_value_of_dtype(tensor.dtype)
            )
            return (
                self.gamma * (tensor - mean) / (std + util.tiny_value_of_dtype(tensor.dtype)) + self.beta
            )

    # ------------------------------------------------------------------ allennlp/modules/maxout.py
    class Maxout(torch.nn.Module):
        def __init__(self, input_dim: int, num_layers: int, output_dims, pool_sizes, dropout=0.0) -> None:
            super().__init__()
            if not isinstance(output_dims, list):
                output_dims = [output_dims] * num_layers  # type: ignore
            if not isinstance(pool_sizes, list):
                pool_sizes = [pool_sizes] * num_layers  # type: ignore
            if not isinstance(dropout, list):
                dropout = [dropout] * num_layers  # type: ignore
            if len(output_dims) != num_layers:
                raise ConfigurationError(
                    "len(output_dims) (%d) != num_layers (%d)" % (len(output_dims), num_layers)
                )
            if len(pool_sizes) != num_layers:
                raise ConfigurationError(
                    "len(pool_sizes) (%d) != num_layers (%d)" % (len(pool_sizes), num_layers)
                )
            if len(dropout) != num_layers:
                raise ConfigurationError(
                    "len(dropout) (%d) != num_layers (%d)" % (len(dropout), num_layers)
                )

            self._pool_sizes = pool_sizes
            input_dims = [input_dim] + output_dims[:-1]
            linear_layers = []
            for layer_input_dim, layer_output_dim, pool_size in zip(
                input_dims, output_dims, pool_sizes
            ):
                linear_layers.append(torch.nn.Linear(layer_input_dim, layer_output_dim * pool_size))
            self._linear_layers = torch.nn.ModuleList(linear_layers)
            dropout_layers = [torch.nn.Dropout(p=value) for value in dropout]
            self._dropout = torch.nn.ModuleList(dropout_layers)
            self._output_dims = output_dims
            self._output_dim = output_dims[-1]
            self._input_dim = input_dim

        def forward(self, inputs):

            output = inputs
            for layer, layer_output_dim, dropout, pool_size in zip(
                self._linear_layers, self._output_dims, self._dropout, self._pool_sizes
            ):
                affine_output = layer(output)
                # Compute and apply the proper shape for the max.
                shape = list(inputs.size())
                shape[-1] = layer_output_dim
                shape.append(pool_size)

                maxed_output = torch.max(affine_output.view(*shape), dim=-1)[0]
                dropped_output = dropout(maxed_output)
                output = dropped_output
            return output

    # --------------------------------------------------------------- allennlp/modules/gated_sum.py
    class GatedSum(torch.nn.Module):
        def __init__(self, input_dim: int, activation=torch.nn.Sigmoid()) -> None:
            super().__init__()
            self.input_dim = input_dim
            self._gate = torch.nn.Linear(input_dim * 2, 1)
            self._activation = activation

        def forward(self, input_a, input_b):
            if input_a.size() != input_b.size():
                raise ValueError("The input must have the same size.")
            if input_a.size(-1) != self.input_dim:
                raise ValueError("Input size must match `input_dim`.")
            gate_value = self._activation(self._gate(torch.cat([input_a, input_b], -1)))
            return gate_value * input_a + (1 - gate_value) * input_b

    # ------------------------------------------------ allennlp/modules/lstm_cell_with_projection.py
    class LstmCellWithProjection(torch.nn.Module):
        def __init__(self, input_size: int, hidden_size: int, cell_size: int, go_forward: bool = True,
                     recurrent_dropout_probability: float = 0.0,
                     memory_cell_clip_value: Optional[float] = None,
                     state_projection_clip_value: Optional[float] = None) -> None:
            super().__init__()
            self.input_size = input_size
            self.hidden_size = hidden_size
            self.cell_size = cell_size

            self.go_forward = go_forward
            self.state_projection_clip_value = state_projection_clip_value
            self.memory_cell_clip_value = memory_cell_clip_value
            self.recurrent_dropout_probability = recurrent_dropout_probability

            # We do the projections for all the gates all at once.
            self.input_linearity = torch.nn.Linear(input_size, 4 * cell_size, bias=False)
            self.state_linearity = torch.nn.Linear(hidden_size, 4 * cell_size, bias=True)

            # Additional projection matrix for making the hidden state smaller.
            self.state_projection = torch.nn.Linear(cell_size, hidden_size, bias=False)
            self.reset_parameters()

        def reset_parameters(self):
            # Use sensible default initializations for parameters.
            util.block_orthogonal(self.input_linearity.weight.data, [self.cell_size, self.input_size])
            util.block_orthogonal(self.state_linearity.weight.data, [self.cell_size, self.hidden_size])

            self.state_linearity.bias.data.fill_(0.0)
            # Initialize forget gate biases to 1.0 as per An Empirical
            # Exploration of Recurrent Network Architectures, (Jozefowicz, 2015).
            self.state_linearity.bias.data[self.cell_size : 2 * self.cell_size].fill_(1.0)

        def forward(self, inputs, batch_lengths: List[int], initial_state=None):
            batch_size = inputs.size()[0]
            total_timesteps = inputs.size()[1]

            output_accumulator = inputs.new_zeros(batch_size, total_timesteps, self.hidden_size)

            if initial_state is None:
                full_batch_previous_memory = inputs.new_zeros(batch_size, self.cell_size)
                full_batch_previous_state = inputs.new_zeros(batch_size, self.hidden_size)
            else:
                full_batch_previous_state = initial_state[0].squeeze(0)
                full_batch_previous_memory = initial_state[1].squeeze(0)

            current_length_index = batch_size - 1 if self.go_forward else 0
            if self.recurrent_dropout_probability > 0.0 and self.training:
                dropout_mask = util.get_dropout_mask(
                    self.recurrent_dropout_probability, full_batch_previous_state
                )
            else:
                dropout_mask = None

            for timestep in range(total_timesteps):
                # The index depends on which end we start.
                index = timestep if self.go_forward else total_timesteps - timestep - 1

                if self.go_forward:
                    while batch_lengths[current_length_index] <= index:
                        current_length_index -= 1
                # If we're going backwards, we are _picking up_ more indices.
                else:
                    while (
                        current_length_index < (len(batch_lengths) - 1)
                        and batch_lengths[current_length_index + 1] > index
                    ):
                        current_length_index += 1

                # shape (batch_size, cell_size)
                previous_memory = full_batch_previous_memory[0 : current_length_index + 1].clone()
                # Shape (batch_size, hidden_size)
                previous_state = full_batch_previous_state[0 : current_length_index + 1].clone()
                # Shape (batch_size, input_size)
                timestep_input = inputs[0 : current_length_index + 1, index]

                # Do the projections for all the gates all at once.
                # Both have shape (batch_size, 4 * cell_size)
                projected_input = self.input_linearity(timestep_input)
                projected_state = self.state_linearity(previous_state)

                input_gate = torch.sigmoid(
                    projected_input[:, (0 * self.cell_size) : (1 * self.cell_size)]
                    + projected_state[:, (0 * self.cell_size) : (1 * self.cell_size)]
                )
                forget_gate = torch.sigmoid(
                    projected_input[:, (1 * self.cell_size) : (2 * self.cell_size)]
                    + projected_state[:, (1 * self.cell_size) : (2 * self.cell_size)]
                )
                memory_init = torch.tanh(
                    projected_input[:, (2 * self.cell_size) : (3 * self.cell_size)]
                    + projected_state[:, (2 * self.cell_size) : (3 * self.cell_size)]
                )
                output_gate = torch.sigmoid(
                    projected_input[:, (3 * self.cell_size) : (4 * self.cell_size)]
                    + projected_state[:, (3 * self.cell_size) : (4 * self.cell_size)]
                )
                memory = input_gate * memory_init + forget_gate * previous_memory

                if self.memory_cell_clip_value:

                    memory = torch.clamp(
                        memory, -self.memory_cell_clip_value, self.memory_cell_clip_value
                    )

                # shape (current_length_index, cell_size)
                pre_projection_timestep_output = output_gate * torch.tanh(memory)

                # shape (current_length_index, hidden_size)
                timestep_output = self.state_projection(pre_projection_timestep_output)
                if self.state_projection_clip_value:

                    timestep_output = torch.clamp(
                        timestep_output,
                        -self.state_projection_clip_value,
                        self.state_projection_clip_value,
                    )

                # Only do dropout if the dropout prob is > 0.0 and we are in training mode.
                if dropout_mask is not None:
                    timestep_output = timestep_output * dropout_mask[0 : current_length_index + 1]

                full_batch_previous_memory = full_batch_previous_memory.clone()
                full_batch_previous_state = full_batch_previous_state.clone()
                full_batch_previous_memory[0 : current_length_index + 1] = memory
                full_batch_previous_state[0 : current_length_index + 1] = timestep_output
                output_accumulator[0 : current_length_index + 1, index] = timestep_output

            final_state = (
                full_batch_previous_state.unsqueeze(0),
                full_batch_previous_memory.unsqueeze(0),
            )

            return output_accumulator, final_state

    # --------------------------------------------------------------- allennlp/nn/beam_search.py
    from inspect import signature
    from typing import cast, Callable
    import warnings

    StateType = Dict[str, Any]

    class Sampler:
        default_implementation = "deterministic"

        def init_state(self, start_class_log_probabilities, batch_size: int, num_classes: int):
            return {}

        def sample_nodes(self, log_probs, per_node_beam_size: int, state):
            raise NotImplementedError

        def sample_beams(self, log_probs, beam_size: int, state):
            selected_log_probs, selected_indices = torch.topk(log_probs, beam_size, dim=-1)
            return selected_log_probs, selected_indices, {}

    class DeterministicSampler(Sampler):
        def sample_nodes(self, log_probs, per_node_beam_size: int, state):
            selected_log_probs, selected_indices = torch.topk(log_probs, per_node_beam_size, dim=-1)
            return selected_log_probs, selected_indices, {}

    class MultinomialSampler(Sampler):
        def __init__(self, temperature: float = 1.0, with_replacement: bool = False) -> None:
            self.temperature = temperature
            self.with_replacement = with_replacement

        def sample_nodes(self, log_probs, per_node_beam_size: int, state):
            if self.temperature != 1.0:
                _probabilities = torch.nn.functional.softmax(log_probs / self.temperature, dim=-1)
            else:
                _probabilities = log_probs.exp()

            selected_indices = torch.multinomial(
                _probabilities, per_node_beam_size, replacement=self.with_replacement
            )

            return torch.gather(log_probs, 1, selected_indices), selected_indices, state

    class TopKSampler(Sampler):
        def __init__(self, k: int = 1, temperature: float = 1.0, with_replacement: bool = False):
            self.k = k
            self.temperature = temperature or 1.0
            self.with_replacement = with_replacement

        def sample_nodes(self, log_probs, per_node_beam_size: int, state):
            if not per_node_beam_size <= self.k <= log_probs.size()[1]:
                raise ValueError(
                    "k must be a postive integer no less than per_node_beam_size and no greater than vocabulary size"
                )

            # shape (both): (batch_size, k)
            top_k_log_probs, top_k_indices = log_probs.topk(self.k, dim=-1)

            if self.temperature != 1.0:
                top_k_log_probs = top_k_log_probs / self.temperature

            normalized_top_k_probs = torch.nn.functional.softmax(top_k_log_probs, dim=-1)

            sampled_indices = torch.multinomial(
                normalized_top_k_probs, per_node_beam_size, replacement=self.with_replacement
            )

            indices = top_k_indices.gather(-1, sampled_indices)

            return log_probs.gather(1, indices), indices, state

    class TopPSampler(Sampler):
        def __init__(self, p: float = 0.9, temperature: float = 1.0, with_replacement: bool = False):
            if p < 0.0 or p > 1.0:
                raise ValueError("p must be a positive float no greater than 1.0")
            self.p = p
            self.temperature = temperature or 1.0
            self.with_replacement = with_replacement

        def sample_nodes(self, log_probs, per_node_beam_size: int, state):
            if not per_node_beam_size <= log_probs.size()[1]:
                raise ValueError("per_node_beam_size cannot be greater than vocabulary size")

            # First apply temperature coefficient:
            if self.temperature != 1.0:
                _log_probs = torch.nn.functional.log_softmax(log_probs / self.temperature, dim=-1)
            else:
                _log_probs = log_probs

            # Sort the probabilities in descending order to then find cumulative sum
            log_probs_descending, sorting_indices = torch.sort(_log_probs, descending=True)

            # shape: (batch_size, num_classes)
            probabilities_descending = log_probs_descending.exp()
            probabilities_summed = torch.cumsum(probabilities_descending, dim=-1)

            exclusion_mask = probabilities_summed >= self.p

            # We want to include the first index where probabilities_summed >= p, so we shift over one.
            exclusion_mask[..., 1:] = exclusion_mask[..., :-1].clone()
            exclusion_mask[..., 0] = False

            # Make sure there's at least `per_node_beam_size` options to be selected.
            if not self.with_replacement:
                exclusion_mask[..., :per_node_beam_size] = False

            log_probs_descending[exclusion_mask] = min_value_of_dtype(log_probs.dtype)

            filtered_probabilities = torch.nn.functional.softmax(log_probs_descending, dim=-1)

            sampled_indices = torch.multinomial(
                filtered_probabilities, per_node_beam_size, replacement=self.with_replacement
            )

            selected_indices = sorting_indices.gather(-1, sampled_indices)

            return torch.gather(log_probs, 1, selected_indices), selected_indices, state

    class GumbelSampler(Sampler):
        def __init__(self, temperature: float = 1.0):
            self.temperature = temperature

        def init_state(self, start_class_log_probabilities, batch_size: int, num_classes: int):
            # shape: (batch_size, num_classes)
            zeros = start_class_log_probabilities.new_zeros((batch_size, num_classes))

            # shape: (batch_size, num_classes)
            G_phi_S = self.gumbel_with_max(start_class_log_probabilities, zeros)

            return {"G_phi_S": G_phi_S}

        def sample_nodes(self, log_probs, per_node_beam_size: int, state):
            if self.temperature != 1.0:
                _log_probs = torch.nn.functional.log_softmax(log_probs / self.temperature, dim=-1)
            else:
                _log_probs = log_probs

            # shape: (group_size,)
            phi_S = state["phi_S"]

            # shape: (group_size, num_classes)
            phi_S = phi_S.unsqueeze(-1).expand_as(_log_probs)

            # shape: (group_size, num_classes)
            phi_S_new = phi_S + _log_probs

            # shape: (group_size, 1)
            G_phi_S = state["G_phi_S"].unsqueeze(-1)

            # shape: (group_size, num_classes)
            G_phi_S_new = self.gumbel_with_max(phi_S_new, G_phi_S)

            # shape (both): (group_size, per_node_beam_size)
            top_G_phi_S_new, top_indices = torch.topk(G_phi_S_new, per_node_beam_size, dim=-1)

            # shape: (group_size, per_node_beam_size)
            top_log_probs = log_probs.gather(1, top_indices)

            return top_log_probs, top_indices, {"G_phi_S": top_G_phi_S_new}

        def sample_beams(self, log_probs, beam_size: int, state):
            batch_size = log_probs.size()[0]

            # shape: (batch_size * beam_size, per_node_beam_size)
            G_phi_S = state["G_phi_S"]

            # shape: (batch_size, beam_size * per_node_beam_size)
            G_phi_S = G_phi_S.reshape_as(log_probs)

            # shape (both): (batch_size, beam_size)
            G_phi_S_new, selected_indices = torch.topk(G_phi_S, beam_size, dim=-1)

            # shape: (batch_size, beam_size)
            selected_log_probs = log_probs.gather(1, selected_indices)

            # Now sort the selected beams by their true log prob.
            # shape (all): (batch_size, beam_size)
            selected_log_probs, sort_indices = selected_log_probs.sort(dim=-1, descending=True)
            selected_indices = selected_indices.gather(1, sort_indices)
            G_phi_S_new = G_phi_S_new.gather(1, sort_indices)

            # shape: (batch_size * beam_size,)
            G_phi_S_new = G_phi_S_new.reshape(batch_size * beam_size)

            # shape: (batch_size * beam_size,)
            phi_S = selected_log_probs.reshape(batch_size * beam_size)

            return selected_log_probs, selected_indices, {"G_phi_S": G_phi_S_new, "phi_S": phi_S}

        def gumbel(self, phi):
            return -torch.log(-torch.log(torch.rand_like(phi))) + phi

        def gumbel_with_max(self, phi, T):
            # Shape: (batch_size, num_classes)
            G_phi = self.gumbel(phi)

            # Now we find the maximum from these samples.
            # Shape: (batch_size, )
            Z, _ = G_phi.max(dim=-1)

            # Shape: (batch_size, num_classes)
            v = T - G_phi + torch.log1p(-torch.exp(G_phi - Z.unsqueeze(-1)))

            # Shape: (batch_size, num_classes)
            return T - torch.nn.functional.relu(v) - torch.log1p(torch.exp(-v.abs()))

    class BeamSearch:
        def __init__(self, end_index: int, max_steps: int = 50, beam_size: int = 10,
                     per_node_beam_size: int = None, sampler: Sampler = None,
                     min_steps: Optional[int] = None) -> None:
            if not max_steps > 0:
                raise ValueError("max_steps must be positive")
            if not beam_size > 0:
                raise ValueError("beam_size must be positive")
            if per_node_beam_size is not None and not per_node_beam_size > 0:
                raise ValueError("per_node_beam_size must be positive")
            if min_steps is not None:
                if not min_steps >= 0:
                    raise ValueError("min_steps must be non-negative")
                if not min_steps <= max_steps:
                    raise ValueError("min_steps must be less than or equal to max_steps")

            self._end_index = end_index
            self.max_steps = max_steps
            self.beam_size = beam_size
            self.per_node_beam_size = per_node_beam_size or beam_size
            self.sampler = sampler or DeterministicSampler()
            self.min_steps = min_steps or 0

        @staticmethod
        def _reconstruct_sequences(predictions, backpointers):
            # shape: [(batch_size, beam_size, 1)]
            reconstructed_predictions = [predictions[-1].unsqueeze(2)]

            if not backpointers:
                return reconstructed_predictions

            # shape: (batch_size, beam_size)
            cur_backpointers = backpointers[-1]

            for timestep in range(len(predictions) - 2, 0, -1):
                # shape: (batch_size, beam_size, 1)
                cur_preds = predictions[timestep].gather(1, cur_backpointers).unsqueeze(2)

                reconstructed_predictions.append(cur_preds)

                # shape: (batch_size, beam_size)
                cur_backpointers = backpointers[timestep - 1].gather(1, cur_backpointers)

            # shape: (batch_size, beam_size, 1)
            final_preds = predictions[0].gather(1, cur_backpointers).unsqueeze(2)

            reconstructed_predictions.append(final_preds)

            return reconstructed_predictions

        @torch.no_grad()
        def search(self, start_predictions, start_state, step):
            step_signature = signature(step)
            if len(step_signature.parameters) < 3:
                old_step = step

                def new_step(last_predictions, state, time_step: int):
                    return old_step(last_predictions, state)

                return self._search(start_predictions, start_state, new_step)
            else:
                return self._search(start_predictions, start_state, step)

        def _search(self, start_predictions, start_state, step):
            batch_size = start_predictions.size()[0]

            predictions = []
            backpointers = []

            # shape: (batch_size, num_classes)
            start_class_log_probabilities, state = step(start_predictions, start_state, 0)

            num_classes = start_class_log_probabilities.size()[1]

            # Make sure `per_node_beam_size` is not larger than `num_classes`.
            if self.per_node_beam_size > num_classes:
                raise ConfigurationError(
                    f"Target vocab size ({num_classes:d}) too small "
                    f"relative to per_node_beam_size ({self.per_node_beam_size:d}).\n"
                    f"Please decrease beam_size or per_node_beam_size."
                )

            sampler_state = self.sampler.init_state(
                start_class_log_probabilities, batch_size, num_classes
            )

            # Prevent selecting the end symbol if there is any min_steps constraint
            if self.min_steps >= 1:
                start_class_log_probabilities[:, self._end_index] = float("-inf")

            (
                start_top_log_probabilities,
                start_predicted_classes,
                sampler_state,
            ) = self.sampler.sample_beams(start_class_log_probabilities, self.beam_size, sampler_state)

            if self.beam_size == 1 and (start_predicted_classes == self._end_index).all():
                warnings.warn(
                    "Empty sequences predicted. You may want to increase the beam size or ensure "
                    "your step function is working properly.",
                    RuntimeWarning,
                )
                return start_predicted_classes.unsqueeze(-1), start_top_log_probabilities

            # shape: (batch_size, beam_size)
            last_log_probabilities = start_top_log_probabilities

            # shape: [(batch_size, beam_size)]
            predictions.append(start_predicted_classes)

            # shape: (batch_size * beam_size, num_classes)
            log_probs_after_end = start_class_log_probabilities.new_full(
                (batch_size * self.beam_size, num_classes), float("-inf")
            )
            log_probs_after_end[:, self._end_index] = 0.0

            # Set the same state for each element in the beam.
            self._update_initial_state(state, batch_size)

            for timestep in range(self.max_steps - 1):
                # shape: (batch_size * beam_size,)
                last_predictions = predictions[-1].reshape(batch_size * self.beam_size)

                if (last_predictions == self._end_index).all():
                    break
                # shape: (batch_size * beam_size, num_classes)
                class_log_probabilities, state = step(last_predictions, state, timestep + 1)

                if timestep + 2 <= self.min_steps:
                    class_log_probabilities[:, self._end_index] = float("-inf")

                # shape: (batch_size * beam_size, num_classes)
                last_predictions_expanded = last_predictions.unsqueeze(-1).expand(
                    batch_size * self.beam_size, num_classes
                )

                # shape: (batch_size * beam_size, num_classes)
                cleaned_log_probabilities = torch.where(
                    last_predictions_expanded == self._end_index,
                    log_probs_after_end,
                    class_log_probabilities,
                )

                # shape (both): (batch_size * beam_size, per_node_beam_size)
                top_log_probabilities, predicted_classes, sampler_state = self.sampler.sample_nodes(
                    cleaned_log_probabilities, self.per_node_beam_size, sampler_state
                )

                # shape: (batch_size * beam_size, per_node_beam_size)
                expanded_last_log_probabilities = (
                    last_log_probabilities.unsqueeze(2)
                    .expand(batch_size, self.beam_size, self.per_node_beam_size)
                    .reshape(batch_size * self.beam_size, self.per_node_beam_size)
                )

                # shape: (batch_size * beam_size, per_node_beam_size)
                summed_top_log_probabilities = top_log_probabilities + expanded_last_log_probabilities

                # shape: (batch_size, beam_size * per_node_beam_size)
                reshaped_summed = summed_top_log_probabilities.reshape(
                    batch_size, self.beam_size * self.per_node_beam_size
                )

                # shape: (batch_size, beam_size * per_node_beam_size)
                reshaped_predicted_classes = predicted_classes.reshape(
                    batch_size, self.beam_size * self.per_node_beam_size
                )

                # shape (both): (batch_size, beam_size)
                (
                    restricted_beam_log_probs,
                    restricted_beam_indices,
                    sampler_state,
                ) = self.sampler.sample_beams(reshaped_summed, self.beam_size, sampler_state)

                # shape: (batch_size, beam_size)
                restricted_predicted_classes = reshaped_predicted_classes.gather(
                    1, restricted_beam_indices
                )

                predictions.append(restricted_predicted_classes)

                # shape: (batch_size, beam_size)
                last_log_probabilities = restricted_beam_log_probs

                # shape: (batch_size, beam_size)
                backpointer = restricted_beam_indices // self.per_node_beam_size
                backpointers.append(backpointer)

                self._update_state(state, backpointer)

            if not torch.isfinite(last_log_probabilities).all():
                warnings.warn(
                    "Infinite log probabilities encountered. Some final sequences may not make sense. "
                    "This can happen when the beam size is larger than the number of valid (non-zero "
                    "probability) transitions that the step function produces.",
                    RuntimeWarning,
                )

            reconstructed_predictions = self._reconstruct_sequences(predictions, backpointers)

            # shape: (batch_size, beam_size, max_steps)
            all_predictions = torch.cat(list(reversed(reconstructed_predictions)), 2)

            return all_predictions, last_log_probabilities

        @staticmethod
        def _is_multilayer_rnn_decoder(key: str, state_tensor) -> bool:
            return state_tensor.dim() == 3 and key in {
                "decoder_hidden",
                "decoder_context",
            }

        def _update_initial_state(self, state, batch_size: int):
            for key, state_tensor in state.items():
                if state_tensor is None:
                    continue
                multilayer_rnn_decoder = self._is_multilayer_rnn_decoder(key, state_tensor)

                if multilayer_rnn_decoder:
                    # shape: (num_layers, batch_size * beam_size, *)
                    num_layers, _, *last_dims = state_tensor.size()
                    state[key] = (
                        state_tensor.unsqueeze(2)
                        .expand(num_layers, batch_size, self.beam_size, *last_dims)
                        .reshape(num_layers, batch_size * self.beam_size, *last_dims)
                    )
                else:
                    # shape: (batch_size * beam_size, *)
                    _, *last_dims = state_tensor.size()
                    state[key] = (
                        state_tensor.unsqueeze(1)
                        .expand(batch_size, self.beam_size, *last_dims)
                        .reshape(batch_size * self.beam_size, *last_dims)
                    )

        def _update_state(self, state, backpointer):
            batch_size = backpointer.size()[0]

            for key, state_tensor in state.items():
                if state_tensor is None:
                    continue
                multilayer_rnn_decoder = self._is_multilayer_rnn_decoder(key, state_tensor)

                if multilayer_rnn_decoder:
                    # shape: (num_layers, batch_size * beam_size, *)
                    num_layers, _, *last_dims = state_tensor.size()
                    expanded_backpointer = backpointer.view(
                        batch_size, self.beam_size, *([1] * len(last_dims))
                    ).expand(batch_size, self.beam_size, *last_dims)
                    expanded_backpointer = expanded_backpointer.unsqueeze(0).repeat(num_layers, 1, 1, 1)
                    # shape: (num_layers, batch_size * beam_size, *)
                    state[key] = (
                        state_tensor.reshape(num_layers, batch_size, self.beam_size, *last_dims)
                        .gather(2, expanded_backpointer)
                        .reshape(num_layers, batch_size * self.beam_size, *last_dims)
                    )
                else:
                    _, *last_dims = state_tensor.size()
                    # shape: (batch_size, beam_size, *)
                    expanded_backpointer = backpointer.view(
                        batch_size, self.beam_size, *([1] * len(last_dims))
                    ).expand(batch_size, self.beam_size, *last_dims)
                    # shape: (batch_size * beam_size, *)
                    state[key] = (
                        state_tensor.reshape(batch_size, self.beam_size, *last_dims)
                        .gather(1, expanded_backpointer)
                        .reshape(batch_size * self.beam_size, *last_dims)
                    )

    # ------------------------------------------ allennlp/training/metrics/categorical_accuracy.py
    class Metric:
        @staticmethod
        def detach_tensors(*tensors):
            # If the tensors are on the GPU, they might have grad attached. We don't want that.
            return (x.detach() if isinstance(x, torch.Tensor) else x for x in tensors)

    class CategoricalAccuracy(Metric):
        def __init__(self, top_k: int = 1, tie_break: bool = False) -> None:
            if top_k > 1 and tie_break:
                raise ConfigurationError(
                    "Tie break in Categorical Accuracy can be done only for maximum (top_k = 1)"
                )
            if top_k <= 0:
                raise ConfigurationError("top_k passed to Categorical Accuracy must be > 0")
            self._top_k = top_k
            self._tie_break = tie_break
            self.correct_count = 0.0
            self.total_count = 0.0

        def __call__(self, predictions, gold_labels, mask=None):
            predictions, gold_labels, mask = self.detach_tensors(predictions, gold_labels, mask)

            # Some sanity checks.
            num_classes = predictions.size(-1)
            if gold_labels.dim() != predictions.dim() - 1:
                raise ConfigurationError(
                    "gold_labels must have dimension == predictions.size() - 1 but "
                    "found tensor of shape: {}".format(predictions.size())
                )
            if (gold_labels >= num_classes).any():
                raise ConfigurationError(
                    "A gold label passed to Categorical Accuracy contains an id >= {}, "
                    "the number of classes.".format(num_classes)
                )

            predictions = predictions.view((-1, num_classes))
            gold_labels = gold_labels.view(-1).long()
            if not self._tie_break:
                if self._top_k == 1:
                    top_k = predictions.max(-1)[1].unsqueeze(-1)
                else:
                    top_k = predictions.topk(min(self._top_k, predictions.shape[-1]), -1)[1]

                # This is of shape (batch_size, ..., top_k).
                correct = top_k.eq(gold_labels.unsqueeze(-1)).float()
            else:
                max_predictions = predictions.max(-1)[0]
                max_predictions_mask = predictions.eq(max_predictions.unsqueeze(-1))
                correct = max_predictions_mask[
                    torch.arange(gold_labels.numel(), device=gold_labels.device).long(), gold_labels
                ].float()
                tie_counts = max_predictions_mask.sum(-1)
                correct /= tie_counts.float()
                correct.unsqueeze_(-1)

            if mask is not None:
                correct *= mask.view(-1, 1)
                self.total_count += mask.sum()
            else:
                self.total_count += gold_labels.numel()
            self.correct_count += correct.sum()

        def get_metric(self, reset: bool = False):
            if self.total_count > 1e-12:
                accuracy = float(self.correct_count) / float(self.total_count)
            else:
                accuracy = 0.0
            if reset:
                self.reset()

            return {"accuracy": accuracy}

        def reset(self):
            self.correct_count = 0.0
            self.total_count = 0.0

    return SimpleNamespace(util=util, **{
        k: v for k, v in locals().items() if isinstance(v, type) or k in (
            "allowed_transitions", "is_transition_allowed", "squash", "unsquash")
    })


# ----------------------------------------------------------------------------------------------
# NumPy references
# ----------------------------------------------------------------------------------------------
def _lse(a, axis=-1):
    m = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(m, axis) + np.log(np.exp(a - m).sum(axis))


def _softmax(a, axis=-1):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _crf_np(logits, tags, lengths, trans, start, end):
    """Log-likelihood sum, logZ per row and marginals, by enumerating every tag sequence."""
    B, _, K = logits.shape
    total, logz, marg = 0.0, [], np.zeros_like(logits)
    for b in range(B):
        L = lengths[b]
        paths = np.array(list(itertools.product(range(K), repeat=L)))
        sc = start[paths[:, 0]] + end[paths[:, -1]] + logits[b, np.arange(L), paths].sum(1)
        sc = sc + trans[paths[:, :-1], paths[:, 1:]].sum(1)
        z = _lse(sc)
        p = np.exp(sc - z)
        for t in range(L):
            np.add.at(marg[b, t], paths[:, t], p)
        y = tags[b, :L]
        num = start[y[0]] + end[y[-1]] + logits[b, np.arange(L), y].sum() + trans[y[:-1], y[1:]].sum()
        total += num - z
        logz.append(z)
    return total, np.array(logz), marg


def _seq_ce_np(logits, targets, weights, average="batch", label_smoothing=None, gamma=None, alpha=None):
    lp = logits - _lse(logits)[..., None]
    C = logits.shape[-1]
    w = weights.astype(np.float64)
    wsum = w.sum(1)
    pt = np.exp(np.take_along_axis(lp, targets[..., None], -1)[..., 0])
    if gamma:
        w = w * (1 - pt) ** gamma
    if alpha is not None:
        a = np.array([1 - alpha, alpha]) if isinstance(alpha, float) else np.asarray(alpha, float)
        w = w * a[targets]
    if label_smoothing:
        q = np.full(lp.shape, label_smoothing / C)
        np.put_along_axis(q, targets[..., None], 1 - label_smoothing + label_smoothing / C, -1)
        nll = -(lp * q).sum(-1)
    else:
        nll = -np.take_along_axis(lp, targets[..., None], -1)[..., 0]
    nll = nll * w
    per = nll.sum(1) / (wsum + 1e-13)
    if average == "batch":
        return per.sum() / ((wsum > 0).sum() + 1e-13)
    if average == "token":
        return nll.sum() / (wsum.sum() + 1e-13)
    return per


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _lstm_np(x, lengths, Wi, Ws, bs, Wp, go_forward=True, mclip=None, sclip=None):
    B, T, _ = x.shape
    C, H = Wp.shape[1], Wp.shape[0]
    out = np.zeros((B, T, H))
    h_fin, c_fin = np.zeros((B, H)), np.zeros((B, C))
    for b in range(B):
        h, c = np.zeros(H), np.zeros(C)
        steps = range(lengths[b]) if go_forward else reversed(range(lengths[b]))
        for t in steps:
            z = Wi @ x[b, t] + Ws @ h + bs
            i, f, g, o = _sig(z[:C]), _sig(z[C:2 * C]), np.tanh(z[2 * C:3 * C]), _sig(z[3 * C:])
            c = i * g + f * c
            if mclip:
                c = np.clip(c, -mclip, mclip)
            h = Wp @ (o * np.tanh(c))
            if sclip:
                h = np.clip(h, -sclip, sclip)
            out[b, t] = h
        h_fin[b], c_fin[b] = h, c
    return out, h_fin, c_fin


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def _t(torch, a, dtype=None):
    return torch.tensor(np.asarray(a), dtype=dtype)


def _assign(torch, param, arr):
    with torch.no_grad():
        param.copy_(torch.tensor(np.asarray(arr), dtype=param.dtype))


BIO = {0: "O", 1: "B-X", 2: "I-X"}


# ----------------------------------------------------------------------------------------------
# nn/util.py
# ----------------------------------------------------------------------------------------------
def test_masked_softmax_log_softmax_max_mean_flip():
    torch = lucid
    U = allennlp(torch).util
    rng = np.random.default_rng(0)
    v = rng.normal(size=(3, 4)) * 3
    m = np.array([[1, 1, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0]], bool)
    V, M = _t(torch, v), _t(torch, m)
    # non memory-efficient: a fully masked row gives zeros
    ref = _softmax(v * m) * m
    ref = ref / (ref.sum(-1, keepdims=True) + 1e-13)
    np.testing.assert_allclose(_np(U.masked_softmax(V, M)), ref, rtol=1e-12, atol=1e-15)
    assert np.all(_np(U.masked_softmax(V, M))[2] == 0)
    # memory-efficient: masked entries exactly 0, a fully masked row uniform
    eff = _np(U.masked_softmax(V, M, memory_efficient=True))
    ref2 = _softmax(np.where(m, v, np.finfo(np.float64).min))
    np.testing.assert_allclose(eff, ref2, rtol=1e-12)
    np.testing.assert_allclose(eff[2], 0.25)
    np.testing.assert_allclose(eff[:2], ref[:2], rtol=1e-12, atol=1e-15)
    # None mask, and a mask with fewer dims (unsqueezed on dim 1)
    np.testing.assert_allclose(_np(U.masked_softmax(V, None)), _softmax(v), rtol=1e-12)
    v3 = rng.normal(size=(3, 2, 4))
    got = _np(U.masked_softmax(_t(torch, v3), M, memory_efficient=True))
    np.testing.assert_allclose(got[:2], _softmax(np.where(m[:, None], v3, -1e300))[:2], rtol=1e-12)
    # masked_log_softmax: v + log(mask + tiny), finite on a fully masked row
    ls = _np(U.masked_log_softmax(V, M))
    # (a bool mask + a Python float is float32, PyTorch's default dtype: the log is float32's)
    vv = v + np.log(m.astype(np.float32) + np.float32(1e-13)).astype(np.float64)
    np.testing.assert_allclose(ls, vv - _lse(vv)[:, None], rtol=1e-12, atol=1e-20)
    assert np.isfinite(ls).all()
    np.testing.assert_allclose(np.exp(ls[0])[m[0]].sum(), 1.0, rtol=1e-12)
    # masked_max / masked_mean
    mx = _np(U.masked_max(V[:2], M[:2], dim=-1))
    np.testing.assert_allclose(mx, [v[0][m[0]].max(), v[1][m[1]].max()])
    mk = _np(U.masked_max(V, M, dim=1, keepdim=True))
    assert mk.shape == (3, 1) and mk[2, 0] == np.finfo(np.float64).min
    mean = _np(U.masked_mean(V, M, dim=-1))
    np.testing.assert_allclose(mean[:2], [v[0][m[0]].mean(), v[1][m[1]].mean()], rtol=1e-12)
    assert mean[2] == 0.0
    # masked_flip: each sequence reversed within its length, padding kept at the end
    seq = np.arange(1, 13, dtype=np.float64).reshape(3, 4)
    fl = _np(U.masked_flip(_t(torch, seq), [4, 2, 3]))
    np.testing.assert_array_equal(fl, [[4, 3, 2, 1], [6, 5, 0, 0], [11, 10, 9, 0]])
    with pytest.raises(AssertionError, match="does not match batch size"):
        U.masked_flip(_t(torch, seq), [1, 2])
    # logsumexp
    np.testing.assert_allclose(_np(U.logsumexp(V, 0)), _lse(v, 0), rtol=1e-12)
    np.testing.assert_allclose(_np(U.logsumexp(V, 1, keepdim=True)), _lse(v, 1)[:, None], rtol=1e-12)
    # dtype helpers
    assert U.tiny_value_of_dtype(torch.float) == 1e-13 and U.tiny_value_of_dtype(torch.half) == 1e-4
    assert U.min_value_of_dtype(torch.float32) == np.finfo(np.float32).min
    assert U.max_value_of_dtype(torch.int64) == np.iinfo(np.int64).max
    with pytest.raises(TypeError, match="floating point"):
        U.tiny_value_of_dtype(torch.long)
    with pytest.raises(TypeError, match="bool"):
        U.min_value_of_dtype(torch.bool)


def _viterbi_enum(unary, trans, start=None, end=None, fixed=None):
    L, K = unary.shape
    out = []
    for p in itertools.product(range(K), repeat=L):
        if fixed and any(o != -1 and o != q for o, q in zip(fixed, p)):
            continue
        s = unary[np.arange(L), list(p)].sum() + sum(trans[a, b] for a, b in zip(p[:-1], p[1:]))
        if start is not None:
            s += start[p[0]] + end[p[-1]]
        if np.isfinite(s):
            out.append((s, list(p)))
    out.sort(key=lambda z: -z[0])
    return out


def test_viterbi_decode_by_enumeration():
    torch = lucid
    U = allennlp(torch).util
    rng = np.random.default_rng(1)
    unary = rng.normal(size=(4, 3)).astype(np.float32)
    trans = rng.normal(size=(3, 3)).astype(np.float32)
    ref = _viterbi_enum(unary.astype(float), trans.astype(float))
    path, score = U.viterbi_decode(_t(torch, unary), _t(torch, trans))
    assert path == ref[0][1]
    assert abs(float(score) - ref[0][0]) < 1e-5
    paths, scores = U.viterbi_decode(_t(torch, unary), _t(torch, trans), top_k=4)
    assert paths == [r[1] for r in ref[:4]]
    np.testing.assert_allclose(_np(scores), [r[0] for r in ref[:4]], rtol=1e-5)
    # allowed start/end transitions (-inf forbids)
    st = np.array([0.3, -np.inf, 0.1], np.float32)
    en = np.array([-np.inf, 0.2, 0.5], np.float32)
    ref = _viterbi_enum(unary.astype(float), trans.astype(float), st.astype(float), en.astype(float))
    # (the START/END sentinels are passed as observations, so the score returned is the END
    # one-hot's 100000 and only the best path is meaningful: AllenNLP's own tests check top-1 only)
    path, score = U.viterbi_decode(_t(torch, unary), _t(torch, trans), allowed_start_transitions=_t(torch, st),
                                   allowed_end_transitions=_t(torch, en))
    assert path == ref[0][1] and path[0] != 1 and path[-1] != 0
    assert float(score) == 100000.0
    # only the end restricted
    ref = _viterbi_enum(unary.astype(float), trans.astype(float), np.zeros(3), en.astype(float))
    path, score = U.viterbi_decode(_t(torch, unary), _t(torch, trans), allowed_end_transitions=_t(torch, en))
    assert path == ref[0][1]
    # observations pin tags
    obs = [-1, 2, -1, 0]
    ref = _viterbi_enum(unary.astype(float), trans.astype(float), fixed=obs)
    path, _ = U.viterbi_decode(_t(torch, unary), _t(torch, trans), tag_observations=obs)
    assert path == ref[0][1] and path[1] == 2 and path[3] == 0
    with pytest.raises(ValueError, match="top_k must be either None or an integer >=1"):
        U.viterbi_decode(_t(torch, unary), _t(torch, trans), top_k=0)
    with pytest.raises(Exception, match="not the same length"):
        U.viterbi_decode(_t(torch, unary), _t(torch, trans), tag_observations=[0, 1])


def test_sequence_cross_entropy_with_logits_options_and_gradient():
    torch = lucid
    U = allennlp(torch).util
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(3, 4, 5))
    targets = rng.integers(0, 5, size=(3, 4))
    weights = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], bool)
    L, Tg, W = _t(torch, logits), _t(torch, targets), _t(torch, weights)
    for kw in [{}, {"label_smoothing": 0.2}, {"gamma": 2.0}, {"alpha": [0.1, 0.2, 0.3, 0.2, 0.2]},
               {"gamma": 1.5, "alpha": [0.5, 1, 1, 2, 1], "label_smoothing": 0.1}]:
        for avg in ("batch", "token", None):
            got = _np(U.sequence_cross_entropy_with_logits(L, Tg, W, average=avg, **kw))
            np.testing.assert_allclose(got, _seq_ce_np(logits, targets, weights, avg, **kw), rtol=1e-10,
                                       err_msg=str((kw, avg)))
    # a float alpha is the binary case
    t2 = rng.integers(0, 2, size=(3, 4))
    got = _np(U.sequence_cross_entropy_with_logits(_t(torch, logits[..., :2]), _t(torch, t2), W, alpha=0.25))
    np.testing.assert_allclose(got, _seq_ce_np(logits[..., :2], t2, weights, alpha=0.25), rtol=1e-10)
    got = _np(U.sequence_cross_entropy_with_logits(_t(torch, logits[..., :2]), _t(torch, t2), W,
                                                   alpha=_t(torch, 0.25)))
    np.testing.assert_allclose(got, _seq_ce_np(logits[..., :2], t2, weights, alpha=0.25), rtol=1e-10)
    # float64 gradient against central differences
    kw = {"gamma": 2.0, "alpha": [0.5, 1, 1, 2, 1], "label_smoothing": 0.1}
    Lg = _t(torch, logits).requires_grad_()
    U.sequence_cross_entropy_with_logits(Lg, Tg, W, average="token", **kw).backward()
    fd = _fd(lambda a: _seq_ce_np(a, targets, weights, "token", **kw), logits)
    np.testing.assert_allclose(_np(Lg.grad), fd, atol=1e-8)
    assert np.all(_np(Lg.grad)[2] == 0) and np.all(_np(Lg.grad)[0, 3] == 0)
    with pytest.raises(ValueError, match="expected one of None, 'token', or 'batch'"):
        U.sequence_cross_entropy_with_logits(L, Tg, W, average="sum")
    with pytest.raises(TypeError, match="alpha must be float"):
        U.sequence_cross_entropy_with_logits(L, Tg, W, alpha="x")


def test_index_select_span_select_masks_and_misc_utils():
    torch = lucid
    U = allennlp(torch).util
    rng = np.random.default_rng(3)
    # the docstring example of flatten_and_batch_shift_indices
    idx = torch.ones([2, 3], dtype=torch.long)
    assert U.flatten_and_batch_shift_indices(idx, 10).tolist() == [1, 1, 1, 11, 11, 11]
    with pytest.raises(Exception, match=r"should be in range \(0, 9\)"):
        U.flatten_and_batch_shift_indices(idx * 10, 10)
    target = rng.normal(size=(2, 5, 3))
    T = _t(torch, target)
    ind = np.array([[[0, 4], [2, 2]], [[1, 3], [4, 0]]])
    sel = _np(U.batched_index_select(T, _t(torch, ind)))
    np.testing.assert_array_equal(sel, target[np.arange(2)[:, None, None], ind])
    # spans (inclusive); the last one runs past the end and is masked there
    spans = np.array([[[0, 2], [3, 3]], [[1, 4], [4, 6]]])
    emb, smask = U.batched_span_select(T, _t(torch, spans))
    emb, smask = _np(emb), _np(smask)
    assert emb.shape == (2, 2, 4, 3)
    np.testing.assert_array_equal(smask, [[[1, 1, 1, 0], [1, 0, 0, 0]], [[1, 1, 1, 1], [1, 0, 0, 0]]])
    np.testing.assert_array_equal(emb[1, 0], target[1, 1:5])
    np.testing.assert_array_equal(emb[0, 0, :3], target[0, 0:3])
    np.testing.assert_array_equal(emb[0, 0, 3], target[0, 0])  # masked index 0
    fi = _np(U.flattened_index_select(T, _t(torch, np.array([[0, 1], [4, 2], [3, 3]]))))
    np.testing.assert_array_equal(fi, target[:, [[0, 1], [4, 2], [3, 3]]])
    with pytest.raises(Exception, match="only 2 dimensional"):
        U.flattened_index_select(T, _t(torch, np.array([0, 1])))
    # get_text_field_mask: ids, characters, wrapping, explicit mask
    ids = np.array([[5, 3, 0, 0], [2, 0, 0, 0]])
    chars = np.zeros((2, 4, 3), int)
    chars[0, :2, 0] = 7
    chars[1, 0, 2] = 1
    m = _np(U.get_text_field_mask({"tokens": {"tokens": _t(torch, ids)},
                                   "chars": {"token_characters": _t(torch, chars)}}))
    np.testing.assert_array_equal(m, ids != 0)
    np.testing.assert_array_equal(_np(U.get_text_field_mask({"chars": {"c": _t(torch, chars)}})), (chars != 0).any(-1))
    np.testing.assert_array_equal(_np(U.get_text_field_mask({"w": {"t": _t(torch, chars)}}, num_wrapping_dims=1)),
                                  chars != 0)
    np.testing.assert_array_equal(_np(U.get_text_field_mask({"t": {"mask": _t(torch, ids)}})), ids != 0)
    with pytest.raises(ValueError, match="Expected a tensor with dimension 2 or 3, found 1"):
        U.get_text_field_mask({"t": {"x": _t(torch, ids[0])}})
    # weighted_sum in its three shapes
    mat = rng.normal(size=(2, 4, 3))
    att2, att3, att4 = rng.random((2, 4)), rng.random((2, 5, 4)), rng.random((2, 6, 5, 4))
    np.testing.assert_allclose(_np(U.weighted_sum(_t(torch, mat), _t(torch, att2))),
                               np.einsum("bn,bnd->bd", att2, mat), rtol=1e-12)
    np.testing.assert_allclose(_np(U.weighted_sum(_t(torch, mat), _t(torch, att3))),
                               np.einsum("bqn,bnd->bqd", att3, mat), rtol=1e-12)
    np.testing.assert_allclose(_np(U.weighted_sum(_t(torch, mat), _t(torch, att4))),
                               np.einsum("bpqn,bnd->bpqd", att4, mat), rtol=1e-12)
    mat4 = rng.normal(size=(2, 5, 4, 3))
    np.testing.assert_allclose(_np(U.weighted_sum(_t(torch, mat4), _t(torch, att3))),
                               np.einsum("bqn,bqnd->bqd", att3, mat4), rtol=1e-12)
    # bucket_values: [0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+]
    d = np.arange(0, 80)
    expect = np.where(d <= 4, d, np.floor(np.log2(np.maximum(d, 1))).astype(int) + 3).clip(0, 9)
    np.testing.assert_array_equal(_np(U.bucket_values(_t(torch, d))), expect)
    assert _np(U.bucket_values(_t(torch, np.array([5, 7, 8, 15, 16, 64, 1000])))).tolist() == [5, 5, 6, 6, 7, 9, 9]
    # sentence boundaries: add, then remove
    tok = np.array([[4, 5, 6], [7, 8, 0]])
    t2, m2 = U.add_sentence_boundary_token_ids(_t(torch, tok), _t(torch, tok != 0), 1, 2)
    assert _np(t2).tolist() == [[1, 4, 5, 6, 2], [1, 7, 8, 2, 0]]
    assert _np(m2).tolist() == [[True] * 5, [True] * 4 + [False]]
    e3 = rng.random((2, 3, 2)) + 0.1
    e3[1, 2] = 0
    t3, m3 = U.add_sentence_boundary_token_ids(_t(torch, e3), _t(torch, tok != 0), _t(torch, np.array([9., 9.])),
                                               _t(torch, np.array([8., 8.])))
    t3n = _np(t3)
    np.testing.assert_array_equal(t3n[:, 0], 9.0)
    np.testing.assert_array_equal(t3n[0, 4], 8.0)
    np.testing.assert_array_equal(t3n[1, 3], 8.0)
    np.testing.assert_array_equal(t3n[1, 4], 0.0)
    np.testing.assert_array_equal(t3n[:, 1:4][tok != 0], e3[tok != 0])
    back, bm = U.remove_sentence_boundaries(t3, m3)
    np.testing.assert_array_equal(_np(back), e3)
    np.testing.assert_array_equal(_np(bm), tok != 0)
    with pytest.raises(ValueError, match="only accepts 2D and 3D input"):
        U.add_sentence_boundary_token_ids(_t(torch, e3[..., None]), _t(torch, tok != 0), 1, 2)
    # lengths and sorting
    lens = _t(torch, np.array([2, 4, 1]))
    np.testing.assert_array_equal(_np(U.get_mask_from_sequence_lengths(lens, 4)),
                                  np.arange(1, 5)[None] <= np.array([2, 4, 1])[:, None])
    x = rng.normal(size=(3, 2))
    st, sl, restore, perm = U.sort_batch_by_length(_t(torch, x), lens)
    assert _np(sl).tolist() == [4, 2, 1] and _np(perm).tolist() == [1, 0, 2]
    np.testing.assert_array_equal(_np(st.index_select(0, restore)), x)
    with pytest.raises(Exception, match="must be torch.Tensors"):
        U.sort_batch_by_length(x, lens)
    enc = rng.normal(size=(3, 4, 6))
    mask = np.arange(4)[None] < np.array([2, 4, 1])[:, None]
    fin = _np(U.get_final_encoder_states(_t(torch, enc), _t(torch, mask), bidirectional=True))
    np.testing.assert_array_equal(fin[:, :3], enc[[0, 1, 2], [1, 3, 0], :3])
    np.testing.assert_array_equal(fin[:, 3:], enc[:, 0, 3:])
    # masked_topk: the kept items in their original order
    inp = rng.normal(size=(2, 6))
    mk = np.ones((2, 6), bool)
    mk[0, [1, 4]] = False
    ti, tm, tix = U.masked_topk(_t(torch, inp), _t(torch, mk), _t(torch, np.array([3, 2])))
    for b, k in enumerate([3, 2]):
        keep = np.sort(np.argsort(-np.where(mk[b], inp[b], -np.inf))[:k])
        assert _np(tix)[b, :k].tolist() == keep.tolist()
        np.testing.assert_array_equal(_np(ti)[b, :k], inp[b, keep])
    assert _np(tm).tolist() == [[True, True, True], [True, True, False]]
    # get_range_vector, positional features, combined dims
    assert U.get_range_vector(4, -1).tolist() == [0, 1, 2, 3]
    pf = _np(U.add_positional_features(torch.zeros(1, 3, 5)))
    inv = np.exp(np.arange(2) * -math.log(1e4) / 1)
    st_ = np.arange(3)[:, None] * inv[None]
    np.testing.assert_allclose(pf[0], np.concatenate([np.sin(st_), np.cos(st_), np.zeros((3, 1))], 1), atol=1e-6)
    assert U.get_combined_dim("x,y,x*y,x-y", [3, 3]) == 12
    with pytest.raises(Exception, match='Tensor dims must match for operation "\\*"'):
        U.get_combined_dim("x*y", [3, 4])
    with pytest.raises(Exception, match="tensor.dim\\(\\) \\(2\\) != mask.dim\\(\\) \\(1\\)"):
        U.replace_masked_values(T[0], _t(torch, mk[0]), 0.0)


def test_combine_tensors_and_multiply_equals_concatenation_times_weights():
    torch = lucid
    U = allennlp(torch).util
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 3, 1, 4))
    y = rng.normal(size=(2, 1, 5, 4)) + 3.0
    comb = "x,y,x*y,x+y,x-y,x/y"
    w = rng.normal(size=U.get_combined_dim(comb, [4, 4]))
    got = _np(U.combine_tensors_and_multiply(comb, [_t(torch, x), _t(torch, y)], _t(torch, w)))
    xb, yb = np.broadcast_arrays(x, y)
    cat = np.concatenate([xb, yb, xb * yb, xb + yb, xb - yb, xb / yb], -1)
    np.testing.assert_allclose(got, cat @ w, rtol=1e-10)
    full = _np(U.combine_tensors("1,2,1*2", [_t(torch, xb), _t(torch, yb)]))
    np.testing.assert_array_equal(full, np.concatenate([xb, yb, xb * yb], -1))
    with pytest.raises(Exception, match="Invalid operation: %"):
        U.combine_tensors("1%2", [_t(torch, xb), _t(torch, yb)])
    with pytest.raises(Exception, match="Invalid combination: 1\\*\\*2"):
        U.combine_tensors("1**2", [_t(torch, xb), _t(torch, yb)])


# ----------------------------------------------------------------------------------------------
# modules/conditional_random_field.py
# ----------------------------------------------------------------------------------------------
def _crf_setup(torch, A, rng, include=True, constraints=None):
    crf = A.ConditionalRandomField(3, constraints=constraints, include_start_end_transitions=include).double()
    trans, start, end = rng.normal(size=(3, 3)), rng.normal(size=3), rng.normal(size=3)
    _assign(torch, crf.transitions, trans)
    if include:
        _assign(torch, crf.start_transitions, start)
        _assign(torch, crf.end_transitions, end)
    else:
        start, end = np.zeros(3), np.zeros(3)
    logits = rng.normal(size=(3, 4, 3))
    tags = rng.integers(0, 3, size=(3, 4))
    lengths = [4, 3, 1]
    mask = np.arange(4)[None] < np.array(lengths)[:, None]
    return crf, trans, start, end, logits, tags, lengths, mask


def test_crf_log_likelihood_by_enumeration_and_gradients():
    torch = lucid
    A = allennlp(torch)
    rng = np.random.default_rng(5)
    for include in (True, False):
        crf, trans, start, end, logits, tags, lengths, mask = _crf_setup(torch, A, rng, include)
        L = _t(torch, logits).requires_grad_()
        ll = crf(L, _t(torch, tags), _t(torch, mask.astype(np.int64)))
        ref, logz, marg = _crf_np(logits, tags, lengths, trans, start, end)
        assert abs(ll.item() - ref) < 1e-10, include
        np.testing.assert_allclose(_np(crf._input_likelihood(_t(torch, logits), _t(torch, mask))), logz, rtol=1e-12)
        ll.backward()
        # d ll / d logits = one-hot(tags) - marginals on the unmasked steps, 0 on the padding
        onehot = np.eye(3)[tags] * mask[..., None]
        np.testing.assert_allclose(_np(L.grad), onehot - marg, atol=1e-10)
        fd = _fd(lambda a: _crf_np(logits, tags, lengths, a, start, end)[0], trans)
        np.testing.assert_allclose(_np(crf.transitions.grad), fd, atol=1e-7)
        if include:
            fd = _fd(lambda a: _crf_np(logits, tags, lengths, trans, a, end)[0], start)
            np.testing.assert_allclose(_np(crf.start_transitions.grad), fd, atol=1e-7)
            fd = _fd(lambda a: _crf_np(logits, tags, lengths, trans, start, a)[0], end)
            np.testing.assert_allclose(_np(crf.end_transitions.grad), fd, atol=1e-7)
    # no mask: every step counts
    full = crf(_t(torch, logits), _t(torch, tags)).item()
    assert abs(full - _crf_np(logits, tags, [4, 4, 4], trans, start, end)[0]) < 1e-10


def test_crf_constrained_viterbi_tags_by_enumeration():
    torch = lucid
    A = allennlp(torch)
    allowed = A.allowed_transitions("BIO", BIO)
    assert sorted(allowed) == [(0, 0), (0, 1), (0, 4), (1, 0), (1, 1), (1, 2), (1, 4), (2, 0), (2, 1),
                               (2, 2), (2, 4), (3, 0), (3, 1)]
    assert (0, 2) not in allowed and (3, 2) not in allowed
    bioul = A.allowed_transitions("BIOUL", {0: "O", 1: "B-X", 2: "I-X", 3: "L-X", 4: "U-X", 5: "B-Y"})
    assert (1, 2) in bioul and (1, 4) not in bioul and (6, 0) in bioul and (6, 2) not in bioul and (1, 7) not in bioul
    assert (4, 7) in bioul and (3, 5) in bioul
    bmes = A.allowed_transitions("BMES", {0: "B-X", 1: "M-X", 2: "E-X", 3: "S-X"})
    assert sorted(bmes) == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 0), (2, 3), (2, 5), (3, 0), (3, 3), (3, 5),
                            (4, 0), (4, 3)]
    iob1 = A.allowed_transitions("IOB1", {0: "O", 1: "I-X", 2: "B-X"})
    assert (0, 2) not in iob1 and (1, 2) in iob1 and (3, 1) in iob1 and (3, 2) not in iob1
    with pytest.raises(Exception, match="Unknown constraint type: XYZ"):
        A.allowed_transitions("XYZ", BIO)
    rng = np.random.default_rng(6)
    crf, trans, start, end, logits, tags, lengths, mask = _crf_setup(torch, A, rng, True, allowed)
    logits[1, 0, 2] = 5.0  # a large I-X score at the start: not allowed after START
    got = crf.viterbi_tags(_t(torch, logits), _t(torch, mask), top_k=3)
    flat = crf.viterbi_tags(_t(torch, logits), _t(torch, mask))
    for b, L in enumerate(lengths):
        ok = []
        for p in itertools.product(range(3), repeat=L):
            if p[0] == 2 or any(a == 0 and c == 2 for a, c in zip(p[:-1], p[1:])):
                continue
            s = start[p[0]] + end[p[-1]] + logits[b, np.arange(L), list(p)].sum()
            s += sum(trans[a, c] for a, c in zip(p[:-1], p[1:]))
            ok.append((s, list(p)))
        ok.sort(key=lambda z: -z[0])
        n = min(3, len(ok))  # a length-1 row has two allowed paths: the third decoding is forbidden
        assert [list(map(int, q)) for q, _ in got[b][:n]] == [p for _, p in ok[:n]], b
        np.testing.assert_allclose([s for _, s in got[b][:n]], [s for s, _ in ok[:n]], rtol=1e-5)
        assert all(s < -5000 for _, s in got[b][n:]) and len(got[b]) == 3
        assert list(map(int, flat[b][0])) == ok[0][1]
    # without constraints the unconstrained optimum may start with I-X
    crf2 = A.ConditionalRandomField(3).double()
    crf2.load_state_dict({k: v for k, v in crf.state_dict().items() if k != "_constraint_mask"}, strict=False)
    best = crf2.viterbi_tags(_t(torch, logits[1:2]), _t(torch, mask[1:2]))[0][0]
    ref = _viterbi_enum(logits[1, :3], trans, start, end)[0][1]
    assert list(map(int, best)) == ref


# ----------------------------------------------------------------------------------------------
# modules: scalar mix, highway, time distributed, span extractors, matrix attention, seq2vec
# ----------------------------------------------------------------------------------------------
def _module_weights(rng):
    return {
        "mix": [0.3, -0.2, 0.5], "gamma": 1.7,
        "hw": [(rng.normal(size=(8, 4)) * 0.5, rng.normal(size=8) * 0.1) for _ in range(2)],
        "sent": rng.normal(size=(1, 1, 4)), "width": rng.normal(size=(4, 2)),
        "att_w": rng.normal(size=(1, 4)), "att_b": rng.normal(size=1),
        "lin_w": rng.normal(size=12), "lin_b": 0.3,
        "bil_w": rng.normal(size=(2, 5, 5)), "bil_b": -0.1,
        "convs": [(rng.normal(size=(3, 4, k)) * 0.5, rng.normal(size=3) * 0.1) for k in (2, 3)],
        "proj_w": rng.normal(size=(2, 6)), "proj_b": rng.normal(size=2),
        "mln_g": rng.normal(size=(1, 1, 4)), "mln_b": rng.normal(size=(1, 1, 4)),
        "mo": [(rng.normal(size=(6, 4)), rng.normal(size=6)), (rng.normal(size=(4, 3)), rng.normal(size=4))],
        "gs_w": rng.normal(size=(1, 8)), "gs_b": rng.normal(size=1),
    }


def _modules_run(torch, wts, data):
    """Every module once, with the given weights; returns NumPy outputs and input gradients."""
    A = allennlp(torch)
    out = {}
    x = torch.tensor(data["x"], requires_grad=True)          # (2, 5, 4) float64
    mask = torch.tensor(data["mask"])                         # (2, 5) bool
    dev = x.device  # legacy constructors (FloatTensor, Tensor(n)) make CPU parameters: model.to(device)
    # ScalarMix, without and with the masked layer norm
    layers = [x * (i + 1) + i for i in range(3)]
    for ln in (False, True):
        mix = A.ScalarMix(3, do_layer_norm=ln, initial_scalar_parameters=wts["mix"]).double().to(dev)
        _assign(torch, mix.gamma, [wts["gamma"]])
        out[f"mix{ln}"] = mix(layers, mask)
    # Highway (two layers) through TimeDistributed
    hw = A.Highway(4, num_layers=2).double().to(dev)
    assert all(float(l.bias.detach()[4:].min()) == 1.0 for l in hw._layers)
    for layer, (w, b) in zip(hw._layers, wts["hw"]):
        _assign(torch, layer.weight, w)
        _assign(torch, layer.bias, b)
    out["highway"] = A.TimeDistributed(hw)(x)
    # span extractors
    spans = torch.tensor(data["spans"])
    smask = torch.tensor(data["span_mask"])
    ep = A.EndpointSpanExtractor(4, "x,y,x*y,y-x", num_width_embeddings=4, span_width_embedding_dim=2,
                                 bucket_widths=True, use_exclusive_start_indices=True).double().to(dev)
    assert ep.get_output_dim() == 18
    _assign(torch, ep._start_sentinel, wts["sent"])
    _assign(torch, ep._span_width_embedding.weight, wts["width"])
    out["endpoint"] = ep(x, spans, span_indices_mask=smask)
    out["endpoint_incl"] = A.EndpointSpanExtractor(4, "x,y").double().to(dev)(x, spans)
    sa = A.SelfAttentiveSpanExtractor(4).double().to(dev)
    _assign(torch, sa._global_attention._module.weight, wts["att_w"])
    _assign(torch, sa._global_attention._module.bias, wts["att_b"])
    out["selfatt"] = sa(x, spans, smask)
    # matrix attentions
    y = x[:, :3] * 0.5 + 2.0
    lin = A.LinearMatrixAttention(4, 4, "x,y,x*y").double().to(dev)
    _assign(torch, lin._weight_vector, wts["lin_w"])
    _assign(torch, lin._bias, [wts["lin_b"]])
    out["linatt"] = lin(x, y)
    bil = A.BilinearMatrixAttention(4, 4, use_input_biases=True, label_dim=2).double().to(dev)
    _assign(torch, bil._weight_matrix, wts["bil_w"])
    _assign(torch, bil._bias, [wts["bil_b"]])
    out["bilatt"] = bil(x, y)
    out["cosatt"] = A.CosineMatrixAttention()(x, y)
    # seq2vec (the CNN in float32: in float64 ``bool_mask * min_value_of_dtype(float64)`` is a float32
    # product, -inf, and 0 * -inf is NaN, in PyTorch as in Lucid)
    cnn = A.CnnEncoder(4, 3, ngram_filter_sizes=(2, 3), output_dim=2).to(dev)
    for i, (w, b) in enumerate(wts["convs"]):
        _assign(torch, getattr(cnn, f"conv_layer_{i}").weight, w)
        _assign(torch, getattr(cnn, f"conv_layer_{i}").bias, b)
    _assign(torch, cnn.projection_layer.weight, wts["proj_w"])
    _assign(torch, cnn.projection_layer.bias, wts["proj_b"])
    out["cnn"] = cnn(x.float(), mask)
    cnn_raw = A.CnnEncoder(4, 3, ngram_filter_sizes=(2, 3)).to(dev)
    cnn_raw.load_state_dict({k: v for k, v in cnn.state_dict().items() if "projection" not in k})
    out["cnn_raw"] = cnn_raw(x.float(), mask)
    out["boe"] = A.BagOfEmbeddingsEncoder(4, averaged=True)(x, torch.tensor(data["boe_mask"]))
    out["boe_nomask"] = A.BagOfEmbeddingsEncoder(4, averaged=True)(x)
    mln = A.MaskedLayerNorm(4).double().to(dev)
    assert float(mln.gamma.detach().max()) == float(np.float32(0.1))  # float32 ones * 0.1, then .double()
    _assign(torch, mln.gamma, wts["mln_g"])
    _assign(torch, mln.beta, wts["mln_b"])
    out["mln"] = mln(x, mask)
    mo = A.Maxout(4, 2, [3, 2], [2, 2]).double().to(dev)
    for layer, (w, b) in zip(mo._linear_layers, wts["mo"]):
        _assign(torch, layer.weight, w)
        _assign(torch, layer.bias, b)
    out["maxout"] = mo(x)
    gs = A.GatedSum(4).double().to(dev)
    _assign(torch, gs._gate.weight, wts["gs_w"])
    _assign(torch, gs._gate.bias, wts["gs_b"])
    out["gated"] = gs(x, x.flip(1) * 2)
    total = sum((v * (i + 1)).sum() for i, v in enumerate(out.values()))
    (gx,) = torch.autograd.grad(total, [x])
    res = {k: _np(v) for k, v in out.items()}
    res["grad_x"] = _np(gx)
    return res


def _module_data(rng):
    return {
        "x": rng.normal(size=(2, 5, 4)),
        "mask": np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool),
        "spans": np.array([[[0, 1], [2, 4], [3, 3]], [[0, 0], [1, 2], [0, 0]]]),
        "span_mask": np.array([[1, 1, 1], [1, 1, 0]], bool),
        "boe_mask": np.array([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0]], bool),
    }


def test_modules_against_numpy():
    torch = lucid
    rng = np.random.default_rng(7)
    wts, data = _module_weights(rng), _module_data(rng)
    r = _modules_run(torch, wts, data)
    x, mask = data["x"], data["mask"]
    layers = [x * (i + 1) + i for i in range(3)]
    s = _softmax(np.array(wts["mix"], np.float32).astype(np.float64))  # FloatTensor([init]), then .double()
    np.testing.assert_allclose(r["mixFalse"], wts["gamma"] * sum(si * l for si, l in zip(s, layers)), rtol=1e-12)
    bm = mask[..., None]
    n = mask.sum() * 4

    def ln(t):
        mu = (t * bm).sum() / n
        var = (((t * bm - mu) * bm) ** 2).sum() / n
        return (t - mu) / np.sqrt(var + 1e-12)
    np.testing.assert_allclose(r["mixTrue"], wts["gamma"] * sum(si * ln(l) for si, l in zip(s, layers)), rtol=1e-10)
    h = x
    for w, b in wts["hw"]:
        p = h @ w.T + b
        g = _sig(p[..., 4:])
        h = g * h + (1 - g) * np.maximum(p[..., :4], 0)
    np.testing.assert_allclose(r["highway"], h, rtol=1e-12)
    # endpoint: exclusive starts (start 0 -> the sentinel), bucketed widths, span mask
    sp, sm = data["spans"], data["span_mask"]
    starts, ends = sp[..., 0] * sm, sp[..., 1] * sm
    b_ = np.arange(2)[:, None]
    st = np.where((starts == 0)[..., None], wts["sent"][0], x[b_, np.maximum(starts - 1, 0)])
    en = x[b_, ends]
    widths = np.minimum(sp[..., 1] - sp[..., 0], 3)
    ref = np.concatenate([st, en, st * en, en - st, wts["width"][widths]], -1) * sm[..., None]
    np.testing.assert_allclose(r["endpoint"], ref, rtol=1e-12)
    np.testing.assert_array_equal(r["endpoint_incl"], np.concatenate([x[b_, sp[..., 0]], x[b_, sp[..., 1]]], -1))
    # self-attentive: softmax of the global logits inside each span
    logit = x @ wts["att_w"][0] + wts["att_b"][0]
    ref = np.zeros((2, 3, 4))
    for b in range(2):
        for k in range(3):
            i, j = sp[b, k]
            a = _softmax(logit[b, i:j + 1])
            ref[b, k] = (a[:, None] * x[b, i:j + 1]).sum(0) * sm[b, k]
    np.testing.assert_allclose(r["selfatt"], ref, rtol=1e-10, atol=1e-14)
    # matrix attentions
    y = x[:, :3] * 0.5 + 2.0
    w = wts["lin_w"]
    ref = (x @ w[:4])[:, :, None] + (y @ w[4:8])[:, None, :] + np.einsum("bid,bjd,d->bij", x, y, w[8:]) + wts["lin_b"]
    np.testing.assert_allclose(r["linatt"], ref, rtol=1e-10)
    x1 = np.concatenate([x, np.ones((2, 5, 1))], -1)
    y1 = np.concatenate([y, np.ones((2, 3, 1))], -1)
    np.testing.assert_allclose(r["bilatt"], np.einsum("bid,lde,bje->blij", x1, wts["bil_w"], y1) + wts["bil_b"],
                               rtol=1e-10)
    xn = x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-13)
    yn = y / (np.linalg.norm(y, axis=-1, keepdims=True) + 1e-13)
    np.testing.assert_allclose(r["cosatt"], xn @ yn.transpose(0, 2, 1), rtol=1e-12)
    # CNN encoder: windows touching padding are dropped from the max; an all-dropped max is 0
    xm = x * mask[..., None]
    feats = []
    for w_, b_c in wts["convs"]:
        k = w_.shape[-1]
        acts = np.stack([np.einsum("bcj,ocj->bo", xm[:, t:t + k].transpose(0, 2, 1), w_) + b_c
                         for t in range(5 - k + 1)], -1)
        acts = np.maximum(acts, 0)
        valid = np.arange(5 - k + 1)[None] < (mask.sum(1) - k + 1)[:, None]
        feats.append(np.where(valid[:, None], acts, -np.inf).max(-1))
    mp = np.concatenate(feats, 1)
    np.testing.assert_allclose(r["cnn_raw"], mp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["cnn"], mp @ wts["proj_w"].T + wts["proj_b"], rtol=1e-5, atol=1e-6)
    cnn64 = allennlp(torch).CnnEncoder(4, 3, ngram_filter_sizes=(2,)).double()
    assert np.isnan(_np(cnn64(_t(torch, x), _t(torch, mask)))).all()
    # bag of embeddings: a zero-length row averages to 0
    bm2 = data["boe_mask"]
    np.testing.assert_allclose(r["boe"], [(x[0] * bm2[0][:, None]).sum(0) / 3, np.zeros(4)], rtol=1e-12)
    np.testing.assert_allclose(r["boe_nomask"], x.mean(1), rtol=1e-12)
    # masked layer norm: statistics over the unmasked entries of the whole batch
    mu = (x * bm).sum() / n
    sd = np.sqrt((((x - mu) * bm) ** 2).sum() / n + 1e-13)
    np.testing.assert_allclose(r["mln"], wts["mln_g"] * (x - mu) / (sd + 1e-13) + wts["mln_b"], rtol=1e-12)
    # maxout: the max over each pool of a linear layer's outputs
    h = x
    for (w, b), od in zip(wts["mo"], [3, 2]):
        h = (h @ w.T + b).reshape(2, 5, od, 2).max(-1)
    np.testing.assert_allclose(r["maxout"], h, rtol=1e-12)
    xb2 = x[:, ::-1] * 2
    g = _sig(np.concatenate([x, xb2], -1) @ wts["gs_w"].T + wts["gs_b"])
    np.testing.assert_allclose(r["gated"], g * x + (1 - g) * xb2, rtol=1e-12)


def test_module_errors_as_the_source():
    torch = lucid
    A = allennlp(torch)
    with pytest.raises(Exception, match="Length of initial_scalar_parameters"):
        A.ScalarMix(2, initial_scalar_parameters=[0.0])
    with pytest.raises(Exception, match="2 tensors were passed, but the module was initialized to mix 3"):
        A.ScalarMix(3)([torch.zeros(2, 2)] * 2)
    with pytest.raises(Exception, match="you mustspecify both"):
        A.EndpointSpanExtractor(4, num_width_embeddings=3)
    with pytest.raises(Exception, match=r"len\(pool_sizes\) \(3\) != num_layers \(2\)"):
        A.Maxout(4, 2, 3, [2, 2, 2])
    with pytest.raises(ValueError, match="The input must have the same size."):
        A.GatedSum(2)(torch.zeros(1, 2), torch.zeros(2, 2))
    with pytest.raises(RuntimeError, match="No dimension to distribute"):
        A.TimeDistributed(torch.nn.Linear(2, 2))(torch.zeros(3, 2))
    ep = A.EndpointSpanExtractor(4)
    with pytest.raises(ValueError, match=r"Dimension mismatch expected \(5\) received \(4\)"):
        ep(torch.zeros(1, 3, 5), torch.zeros(1, 1, 2, dtype=torch.long))
    with pytest.raises(Exception, match="should be in range"):
        ep(torch.zeros(1, 3, 4), torch.tensor([[[0, 3]]]))


# ----------------------------------------------------------------------------------------------
# modules/lstm_cell_with_projection.py
# ----------------------------------------------------------------------------------------------
def _lstm_weights(rng):
    return rng.normal(size=(12, 2)) * 0.6, rng.normal(size=(12, 2)) * 0.6, rng.normal(size=12) * 0.2, \
        rng.normal(size=(2, 3)) * 0.8


def _lstm_run(torch, w, x, lengths, go_forward, clip):
    A = allennlp(torch)
    cell = A.LstmCellWithProjection(2, 2, 3, go_forward=go_forward, memory_cell_clip_value=clip,
                                    state_projection_clip_value=clip).double()
    for p, a in zip([cell.input_linearity.weight, cell.state_linearity.weight, cell.state_linearity.bias,
                     cell.state_projection.weight], w):
        _assign(torch, p, a)
    X = torch.tensor(x, requires_grad=True)
    out, (h, c) = cell(X, lengths)
    (out.sum() + 2 * h.sum() + 3 * c.sum()).backward()
    return _np(out), _np(h[0]), _np(c[0]), _np(X.grad), _np(cell.state_linearity.weight.grad)


def test_lstm_cell_with_projection_against_numpy_and_finite_differences():
    torch = lucid
    A = allennlp(torch)
    # block_orthogonal: each (cell, input) block orthogonal, forget-gate bias 1
    cell = A.LstmCellWithProjection(4, 3, 3)
    W = _np(cell.input_linearity.weight)
    for k in range(4):
        blk = W[3 * k:3 * k + 3]
        np.testing.assert_allclose(blk @ blk.T, np.eye(3), atol=1e-5)
    assert _np(cell.state_linearity.bias).tolist() == [0.0] * 3 + [1.0] * 3 + [0.0] * 6
    with pytest.raises(Exception, match="must be divisible by their respective split_sizes"):
        A.util.block_orthogonal(torch.zeros(4, 3), [3, 3])
    rng = np.random.default_rng(8)
    w = _lstm_weights(rng)
    x = rng.normal(size=(3, 4, 2))
    lengths = [4, 3, 1]  # sorted longest first, as the cell requires
    for go_forward, clip in ((True, None), (False, 0.3)):
        out, h, c, gx, gws = _lstm_run(torch, w, x, lengths, go_forward, clip)
        ro, rh, rc = _lstm_np(x, lengths, *w, go_forward=go_forward, mclip=clip, sclip=clip)
        np.testing.assert_allclose(out, ro, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(h, rh, rtol=1e-10)
        np.testing.assert_allclose(c, rc, rtol=1e-10)

        def f(xx, ws=w[1]):
            o, hh, cc = _lstm_np(xx, lengths, w[0], ws, w[2], w[3], go_forward=go_forward, mclip=clip, sclip=clip)
            return o.sum() + 2 * hh.sum() + 3 * cc.sum()
        np.testing.assert_allclose(gx, _fd(f, x), atol=1e-7)
        np.testing.assert_allclose(gws, _fd(lambda a: f(x, a), w[1]), atol=1e-7)
        assert np.all(out[2, 1:] == 0) and np.all(gx[2, 1:] == 0)


# ----------------------------------------------------------------------------------------------
# PyTorch parity: the same text, weights and data on both libraries
# ----------------------------------------------------------------------------------------------
def _util_run(torch, data):
    U = allennlp(torch).util
    V = torch.tensor(data["v"], requires_grad=True)
    M = torch.tensor(data["m"])
    out = {
        "sm": U.masked_softmax(V, M), "sm_eff": U.masked_softmax(V, M, memory_efficient=True),
        "lsm": U.masked_log_softmax(V, M), "mmax": U.masked_max(V, M, 1), "mmean": U.masked_mean(V, M, 1),
        "lse": U.logsumexp(V, 0),
        "ce": U.sequence_cross_entropy_with_logits(V.view(2, 3, 4), torch.tensor(data["tg"]),
                                                   torch.tensor(data["w"]), gamma=2.0, label_smoothing=0.1,
                                                   alpha=[0.3, 1.0, 2.0, 0.5]),
        "ce_tok": U.sequence_cross_entropy_with_logits(V.view(2, 3, 4), torch.tensor(data["tg"]),
                                                       torch.tensor(data["w"]), average="token"),
        "flip": U.masked_flip(V.view(2, 3, 4), [3, 1]),
    }
    path, score = U.viterbi_decode(torch.tensor(data["un"]), torch.tensor(data["tr"]),
                                   allowed_start_transitions=torch.tensor(data["st"]),
                                   allowed_end_transitions=torch.tensor(data["en"]))
    paths, scores = U.viterbi_decode(torch.tensor(data["un"]), torch.tensor(data["tr"]), top_k=3)
    total = sum((v * (i + 1)).sum() for i, v in enumerate(out.values()))
    (g,) = torch.autograd.grad(total, [V])
    res = {k: _np(v) for k, v in out.items()}
    res.update(grad=_np(g), path=[int(p) for p in path], paths=[[int(p) for p in q] for q in paths],
               scores=_np(scores), score=float(score))
    return res


def _util_data(rng):
    return {"v": rng.normal(size=(6, 4)) * 2, "m": rng.random((6, 4)) > 0.3,
            "tg": rng.integers(0, 4, size=(2, 3)), "w": np.array([[1, 1, 0], [1, 0, 0]], bool),
            "un": rng.normal(size=(4, 3)).astype(np.float32), "tr": rng.normal(size=(3, 3)).astype(np.float32),
            "st": np.array([0.2, -np.inf, 0.0], np.float32), "en": np.array([0.0, 0.5, -np.inf], np.float32)}


def _crf_run(torch, seed_data):
    A = allennlp(torch)
    rng = np.random.default_rng(seed_data)
    crf, trans, start, end, logits, tags, lengths, mask = _crf_setup(torch, A, rng, True,
                                                                     A.allowed_transitions("BIO", BIO))
    L = torch.tensor(logits, requires_grad=True)
    ll = crf(L, torch.tensor(tags), torch.tensor(mask))
    ll.backward()
    best = crf.viterbi_tags(torch.tensor(logits), torch.tensor(mask), top_k=2)
    return {"ll": ll.item(), "gL": _np(L.grad), "gT": _np(crf.transitions.grad),
            "gS": _np(crf.start_transitions.grad), "gE": _np(crf.end_transitions.grad),
            "paths": [[[int(t) for t in p] for p, _ in b] for b in best],
            "vscores": np.array([[s for _, s in b] for b in best])}


def _compare(a, b, rtol, atol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], (list, str, int)):
            assert a[k] == b[k], k
        else:
            np.testing.assert_allclose(np.asarray(a[k], float), np.asarray(b[k], float), rtol=rtol, atol=atol,
                                       err_msg=k)


def test_util_torch_parity():
    torch = pytest.importorskip("torch")
    data = _util_data(np.random.default_rng(9))
    _compare(_util_run(lucid, data), _util_run(torch, data), rtol=1e-6, atol=1e-12)  # float32 Viterbi scores


def test_crf_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _crf_run(lucid, 10), _crf_run(torch, 10)
    _compare(a, b, rtol=1e-6, atol=1e-10)  # float64 likelihood; the Viterbi runs in float32
    assert abs(a["ll"] - b["ll"]) < 1e-10


def test_modules_torch_parity():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    wts, data = _module_weights(rng), _module_data(rng)
    a, b = _modules_run(lucid, wts, data), _modules_run(torch, wts, data)
    _compare(a, b, rtol=1e-10, atol=1e-6)  # float64 modules to 1e-10, the float32 CNN's entries to 1e-6


def test_lstm_cell_torch_parity():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    w = _lstm_weights(rng)
    x = rng.normal(size=(3, 4, 2))
    for go_forward, clip in ((True, 0.4), (False, None)):
        for u, v in zip(_lstm_run(lucid, w, x, [4, 2, 2], go_forward, clip),
                        _lstm_run(torch, w, x, [4, 2, 2], go_forward, clip)):
            np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-14)


# ----------------------------------------------------------------------------------------------
# a tiny CRF tagger (Embedding -> LstmCellWithProjection -> Linear -> CRF), trained with Adam
# ----------------------------------------------------------------------------------------------
def _tagger_data():
    # tokens: 0 "the" -> O, 1 "New" -> B, 2 "York" -> I (only after B/I), 3 pad
    toks = np.array([[1, 2, 2, 0, 0, 1], [0, 1, 2, 0, 3, 3], [1, 2, 0, 1, 3, 3], [0, 0, 3, 3, 3, 3]])
    tags = np.where(toks == 3, 0, np.where(toks == 0, 0, np.where(toks == 1, 1, 2)))
    lengths = [6, 4, 4, 2]
    return toks, tags, lengths


def _tagger_run(torch, steps=12):
    A = allennlp(torch)
    rng = np.random.default_rng(13)
    toks, tags, lengths = _tagger_data()
    emb = torch.nn.Embedding(4, 3).double()
    cell = A.LstmCellWithProjection(3, 3, 4, go_forward=True).double()
    proj = torch.nn.Linear(3, 3).double()
    crf = A.ConditionalRandomField(3, A.allowed_transitions("BIO", BIO)).double()
    mods = [emb, cell, proj, crf]
    for mod in mods:
        for _, p in sorted(mod.named_parameters()):
            if p.requires_grad:  # not the CRF's constraint mask
                _assign(torch, p, rng.normal(size=tuple(p.shape)) * 0.5)
    dev = torch.tensor(0.0).device
    for mod in mods:
        mod.to(dev)
    params = [p for mod in mods for p in mod.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=0.1)
    T, Y = torch.tensor(toks), torch.tensor(tags)
    mask = torch.tensor(np.arange(6)[None] < np.array(lengths)[:, None])
    losses = []

    def logits():
        out, _ = cell(emb(T), lengths)
        return proj(out)
    for _ in range(steps):
        opt.zero_grad()
        loss = -crf(logits(), Y, mask) / 4
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        pred = crf.viterbi_tags(logits(), mask)
    return np.array(losses), [[int(t) for t in p] for p, _ in pred]


def test_crf_tagger_trains():
    losses, pred = _tagger_run(lucid)
    toks, tags, lengths = _tagger_data()
    assert losses[-1] < 0.02 * losses[0], losses  # 4.8 -> 0.027
    assert all(np.diff(losses[-10:]) < 0)
    assert pred == [tags[b, :L].tolist() for b, L in enumerate(lengths)]


def test_crf_tagger_torch_parity():
    torch = pytest.importorskip("torch")
    (la, pa), (lb, pb) = _tagger_run(lucid), _tagger_run(torch)
    np.testing.assert_allclose(la, lb, rtol=1e-9)  # float64 training, 12 Adam steps
    assert pa == pb


# ----------------------------------------------------------------------------------------------
# nn/beam_search.py: a history-dependent toy decoder whose state lives in "decoder_hidden"
# ----------------------------------------------------------------------------------------------
V, END = 5, 4


def _beam_tables(rng):
    return rng.normal(size=(2, V, V)) * 1.5, rng.normal(size=V)


def _beam_run(torch, tables, bias, beam_size, per_node, max_steps, min_steps=None, two_args=False, sampler=None):
    A = allennlp(torch)
    T, Bv = torch.tensor(tables), torch.tensor(bias)
    calls = []

    def step3(last_predictions, state, timestep):
        calls.append(timestep)
        # the count of token 1 so far, kept per layer: (num_layers, group, 1), reordered by the search
        s = state["decoder_hidden"] + (last_predictions == 1).double().view(1, -1, 1)
        rows = state["row"].view(-1)
        logits = T[rows, last_predictions] + 0.3 * s[0] * Bv
        return torch.nn.functional.log_softmax(logits, dim=-1), {"decoder_hidden": s, "row": state["row"]}

    def step2(last_predictions, state):
        return step3(last_predictions, state, -1)
    bs = A.BeamSearch(END, max_steps=max_steps, beam_size=beam_size, per_node_beam_size=per_node,
                      min_steps=min_steps, sampler=sampler and getattr(A, sampler[0])(**sampler[1]))
    start = {"decoder_hidden": torch.zeros(2, 2, 1, dtype=torch.float64), "row": torch.tensor([[0], [1]])}
    preds, logp = bs.search(torch.tensor([0, 0]), start, step2 if two_args else step3)
    return _np(preds), _np(logp), calls


def _beam_np(table, bias, beam, per_node, max_steps, min_steps=0):
    def logp(seq):
        z = table[seq[-1]] + 0.3 * sum(t == 1 for t in seq) * bias
        return z - _lse(z)
    lp0 = logp([0])
    if min_steps >= 1:
        lp0[END] = -np.inf
    beams = [([int(c)], lp0[c]) for c in np.argsort(-lp0, kind="stable")[:beam]]
    for t in range(max_steps - 1):
        if all(q[-1] == END for q, _ in beams):
            break
        cands = []
        for seq, sc in beams:
            if seq[-1] == END:
                lp = np.full(V, -np.inf)
                lp[END] = 0.0
            else:
                lp = logp([0] + seq)
                if t + 2 <= min_steps:
                    lp[END] = -np.inf
            cands += [(seq + [int(c)], sc + lp[c]) for c in np.argsort(-lp, kind="stable")[:per_node]]
        cands.sort(key=lambda z: -z[1])
        beams = cands[:beam]
    return np.array([q for q, _ in beams]), np.array([s for _, s in beams])


def test_beam_search_against_numpy():
    torch = lucid
    tables, bias = _beam_tables(np.random.default_rng(14))
    for beam, per_node, max_steps, min_steps in ((3, 2, 6, None), (4, 5, 5, 3), (1, 1, 4, None)):
        preds, logp, calls = _beam_run(torch, tables, bias, beam, per_node, max_steps, min_steps)
        assert calls[0] == 0 and calls == list(range(len(calls)))
        for b in range(2):
            rq, rs = _beam_np(tables[b], bias, beam, per_node, max_steps, min_steps or 0)
            assert preds[b].tolist() == rq.tolist(), (beam, per_node, b)
            np.testing.assert_allclose(logp[b], rs, rtol=1e-12)
        if min_steps:
            assert not (preds[:, :, :min_steps] == END).any()
        assert np.all(np.diff(logp, axis=1) <= 0)
    # a step function without the timestep argument is wrapped
    p2, l2, calls = _beam_run(torch, tables, bias, 3, 2, 6, two_args=True)
    assert calls == [-1] * len(calls) and p2.tolist() == _beam_run(torch, tables, bias, 3, 2, 6)[0].tolist()
    A = allennlp(torch)
    with pytest.raises(ValueError, match="max_steps must be positive"):
        A.BeamSearch(END, max_steps=0)
    with pytest.raises(ValueError, match="min_steps must be less than or equal to max_steps"):
        A.BeamSearch(END, max_steps=2, min_steps=3)
    with pytest.raises(Exception, match=r"Target vocab size \(5\) too small relative to per_node_beam_size \(6\)"):
        _beam_run(torch, tables, bias, 6, 6, 3)
    # beam size 1 whose first prediction is the end token: an empty-sequence warning
    tab = tables.copy()
    tab[:, 0, END] = 50.0
    with pytest.warns(RuntimeWarning, match="Empty sequences predicted"):
        p, _, _ = _beam_run(torch, tab, bias, 1, 1, 4)
    assert p.tolist() == [[[END]], [[END]]]


def test_beam_search_torch_parity():
    torch = pytest.importorskip("torch")
    tables, bias = _beam_tables(np.random.default_rng(15))
    for cfg in ((3, 2, 6, None), (4, 5, 5, 3)):
        a, b = _beam_run(lucid, tables, bias, *cfg), _beam_run(torch, tables, bias, *cfg)
        assert a[0].tolist() == b[0].tolist() and a[2] == b[2]
        np.testing.assert_allclose(a[1], b[1], rtol=1e-12)


def _seq_logp_np(table, bias, seq):
    tot, hist = 0.0, [0]
    for c in seq:
        if hist[-1] == END:
            assert c == END
            continue
        z = table[hist[-1]] + 0.3 * sum(t == 1 for t in hist) * bias
        tot += (z - _lse(z))[c]
        hist.append(c)
    return tot


def test_beam_search_samplers_return_their_sequences_log_probabilities():
    torch = lucid
    torch.manual_seed(0)
    tables, bias = _beam_tables(np.random.default_rng(16))
    # (with replacement: a finished beam's row is one-hot at the end token, so two draws without
    # replacement are refused, in PyTorch as in Lucid)
    rep = {"with_replacement": True}
    for name, kw in (("MultinomialSampler", {"temperature": 0.7, **rep}),
                     ("TopKSampler", {"k": 3, "temperature": 2.0, **rep}),
                     ("TopPSampler", {"p": 0.6, "temperature": 0.8, **rep}), ("GumbelSampler", {"temperature": 1.3})):
        preds, logp, _ = _beam_run(torch, tables, bias, 3, 2, 5, sampler=(name, kw))
        assert preds.shape[:2] == (2, 3) and np.isfinite(logp).all(), name
        for b in range(2):
            ref = [_seq_logp_np(tables[b], bias, q) for q in preds[b]]
            np.testing.assert_allclose(logp[b], ref, rtol=1e-10, err_msg=name)
        if name == "GumbelSampler":  # its beams come back sorted by their true log probability
            assert np.all(np.diff(logp, axis=1) <= 0)
    # the Gumbel-top-k identity: gumbel_with_max(phi, T) has its maximum exactly at T
    g = allennlp(torch).GumbelSampler()
    phi = torch.tensor(np.log(np.random.default_rng(17).dirichlet(np.ones(6), size=4)))
    Tm = torch.tensor([[0.5], [-1.0], [2.0], [0.0]], dtype=torch.float64)
    np.testing.assert_allclose(_np(g.gumbel_with_max(phi, Tm).max(-1)[0]), _np(Tm)[:, 0], atol=1e-12)
    # top-k / top-p keep to their candidate sets
    lp = torch.log_softmax(torch.tensor(np.random.default_rng(18).normal(size=(50, 6)) * 2), -1)
    _, idx, _ = allennlp(torch).TopKSampler(k=3).sample_nodes(lp, 2, {})
    top3 = np.argsort(-_np(lp), 1)[:, :3]
    assert all(set(r) <= set(t) and len(set(r)) == 2 for r, t in zip(_np(idx), top3))
    _, idx, _ = allennlp(torch).TopPSampler(p=0.5).sample_nodes(lp, 1, {})
    srt = np.sort(np.exp(_np(lp)), 1)[:, ::-1]
    nucleus = (np.cumsum(srt, 1) - srt < 0.5).sum(1)  # entries before the cumulative sum reaches p, + 1
    rank = (np.exp(_np(lp)) > np.exp(np.take_along_axis(_np(lp), _np(idx), 1))).sum(1)
    assert np.all(rank < nucleus)
    with pytest.raises(ValueError, match="k must be a postive integer no less than per_node_beam_size"):
        allennlp(torch).TopKSampler(k=1).sample_nodes(lp, 2, {})
    with pytest.raises(ValueError, match="p must be a positive float no greater than 1.0"):
        allennlp(torch).TopPSampler(p=1.5)


def test_multinomial_without_replacement_past_the_nonzero_weights():
    # AllenNLP's MultinomialSampler (without replacement, its default) draws per_node_beam_size
    # samples from a finished beam's one-hot row; PyTorch's p / Exp(1) top-k returns the non-zero
    # categories first, then zero-weight ones. Lucid raised "fewer than num_samples=2 categories
    # have non-zero weight".
    torch = lucid
    torch.manual_seed(0)
    w = torch.tensor([[0.0, 1.0, 0.0, 0.5], [0.0, 0.0, 2.0, 0.0]])
    for _ in range(5):
        d = _np(torch.multinomial(w, 3)).tolist()
        assert sorted(d[0][:2]) == [1, 3] and len(set(d[0])) == 3 and d[0][2] in (0, 2)
        assert d[1][0] == 2 and len(set(d[1])) == 3
    d = _np(torch.multinomial(torch.tensor([0.0, 1.0, 0.0]), 3)).tolist()
    assert d[0] == 1 and sorted(d) == [0, 1, 2]
    with pytest.raises(RuntimeError, match="multinomial: weights must be finite, non-negative and sum to a positive"):
        torch.multinomial(torch.zeros(2, 3), 1)
    with pytest.raises(RuntimeError, match="cannot sample num_samples=4 from 3 categories without replacement"):
        torch.multinomial(torch.ones(3), 4)
    tables, bias = _beam_tables(np.random.default_rng(19))
    preds, logp, _ = _beam_run(torch, tables, bias, 3, 2, 6, sampler=("MultinomialSampler", {}))
    for b in range(2):
        np.testing.assert_allclose(logp[b], [_seq_logp_np(tables[b], bias, q) for q in preds[b]], rtol=1e-10)


def test_multinomial_without_replacement_torch_parity():
    torch = pytest.importorskip("torch")
    w = np.array([[0.0, 1.0, 0.0, 0.5], [0.0, 0.0, 2.0, 0.0]])
    for lib in (torch, lucid):  # both: the non-zero categories first, then distinct zero-weight ones
        d = lib.multinomial(lib.tensor(w), 4).tolist()
        assert sorted(d[0][:2]) == [1, 3] and sorted(d[0]) == [0, 1, 2, 3]
        assert d[1][0] == 2 and sorted(d[1]) == [0, 1, 2, 3]


def test_categorical_accuracy_top_k_tie_break_and_mask():
    torch = lucid
    A = allennlp(torch)
    pred = np.array([[[0.1, 0.5, 0.5, 0.2], [0.3, 0.3, 0.3, 0.1], [0.9, 0.0, 0.05, 0.05]],
                     [[0.2, 0.1, 0.3, 0.4], [0.0, 0.0, 0.0, 1.0], [0.25, 0.25, 0.25, 0.25]]])
    gold = np.array([[2, 1, 3], [2, 3, 0]])
    mask = np.array([[1, 1, 1], [1, 0, 1]], bool)
    acc = A.CategoricalAccuracy(tie_break=True)
    acc(torch.tensor(pred, requires_grad=True), torch.tensor(gold), torch.tensor(mask))
    # each hit shares its credit among the tied maxima: 1/2 + 1/3 + 0 + 0 + (masked) + 1/4
    assert abs(acc.get_metric()["accuracy"] - (0.5 + 1 / 3 + 0.25) / 5) < 1e-7  # float32 counts
    acc(torch.tensor(pred[:1]), torch.tensor(gold[:1]))
    assert abs(acc.get_metric(reset=True)["accuracy"] - (0.5 + 1 / 3 + 0.25 + 0.5 + 1 / 3) / 8) < 1e-7
    assert acc.get_metric()["accuracy"] == 0.0
    top2 = A.CategoricalAccuracy(top_k=2)
    top2(torch.tensor(pred[:, :1]), torch.tensor(gold[:, :1]))  # rows 0 and 3: 2 in {1, 2}; 2 in {3, 2}
    assert top2.get_metric()["accuracy"] == 1.0
    top1 = A.CategoricalAccuracy()
    top1(torch.tensor(pred[1:, 1:2]), torch.tensor(gold[1:, 1:2]))
    assert top1.get_metric()["accuracy"] == 1.0
    with pytest.raises(Exception, match="Tie break in Categorical Accuracy can be done only for maximum"):
        A.CategoricalAccuracy(top_k=2, tie_break=True)
    with pytest.raises(Exception, match="contains an id >= 4, the number of classes"):
        top1(torch.tensor(pred), torch.tensor(gold + 2))
    with pytest.raises(Exception, match="gold_labels must have dimension == predictions.size\\(\\) - 1"):
        top1(torch.tensor(pred), torch.tensor(gold[0]))


def test_categorical_accuracy_torch_parity():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(20)
    pred = rng.integers(0, 3, size=(4, 5, 6)).astype(float)  # many ties
    gold, mask = rng.integers(0, 6, size=(4, 5)), rng.random((4, 5)) > 0.3
    res = []
    for lib in (lucid, torch):
        A, out = allennlp(lib), []
        for kw in ({}, {"top_k": 3}, {"tie_break": True}):
            acc = A.CategoricalAccuracy(**kw)
            acc(lib.tensor(pred), lib.tensor(gold), lib.tensor(mask))
            acc(lib.tensor(pred[:2]), lib.tensor(gold[:2]))
            out.append(acc.get_metric()["accuracy"])
        res.append(out)
    # with tied scores top-1/top-k pick whichever tied index the kernel gives; the tie-break
    # metric shares the credit and is the same in both
    assert abs(res[0][2] - res[1][2]) < 1e-7
