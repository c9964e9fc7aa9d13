"""THE table of named model variants: one name, one meaning, everywhere (the study,
the TPU smoke check, the benchmarks, the tests).

A variant is a handful of config switches. `Variant.fields` holds only the switches
that define it; every other switch a variant controls (`SWITCHES`) takes its off value
(post-LN BERT's), so applying a variant to any config yields exactly that variant,
whatever the config was before.

    from realformer_tf.models import variants

    config = variants.variant_config("realformer", vocab_size=100, hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64)
    config = variants.apply_variant(config, "pre_ln")     # same sizes, Pre-LN BERT
    variants.get_variant("realformer_mean").description

| name | fields |
|---|---|
| bert | residual_attention=False |
| realformer | residual_attention=True |
| realformer_mean | residual_attention=True, use_running_mean=True |
| pre_ln | residual_attention=False, layer_norm_type="pre" |
| normformer | residual_attention=False, layer_norm_type="normformer" |
| normformer_residual_scale | residual_attention=False, layer_norm_type="normformer", normformer_residual_scale=True |
| realformer_normformer | residual_attention=True, layer_norm_type="normformer" |

Every variant states `residual_attention`: BertConfig's default is RealFormer (true),
not the post-LN BERT baseline, and every file this package writes states it.

ETC configs (`EtcConfig`) have the same switches, so `apply_variant` works on them too
(e.g. ETC + RealFormer: `apply_variant(etc_config, "realformer")`).
"""

import dataclasses
import types

from realformer_tf.errors import UsageError
from realformer_tf.models.bert.config import BertConfig

# The config fields a variant controls, at their off values (post-LN BERT).
SWITCHES = types.MappingProxyType(dict(
    residual_attention=False, use_running_mean=False, layer_norm_type="post",
    normformer_residual_scale=False,
))


@dataclasses.dataclass(frozen=True)
class Variant:
    """One named variant.

    Attributes:
      name: the one name every table, flag and file uses.
      title: a short label for tables and plot legends.
      description: one line saying what it computes.
      fields: the config fields that define it (the other `SWITCHES` stay off).
      aliases: names older versions used (read from old result files, never written).
    """

    name: str
    title: str
    description: str
    fields: types.MappingProxyType = dataclasses.field(hash=False)
    aliases: tuple = ()

    @property
    def settings(self):
        """Every switch of `SWITCHES`: this variant's fields, the others off."""
        return {**SWITCHES, **self.fields}


def _variant(name, title, description, aliases=(), **fields):
    unknown = set(fields) - set(SWITCHES)
    assert not unknown, f"{name}: {unknown} are not variant switches"
    return Variant(name, title, description, types.MappingProxyType(fields), tuple(aliases))


VARIANTS = types.MappingProxyType({v.name: v for v in (
    _variant("bert", "Post-LN BERT", "BERT as released: Post-LN, no residual attention",
             aliases=("post", "bert_post_ln", "vanilla"),
             residual_attention=False),
    _variant("realformer", "RealFormer", "Post-LN BERT whose layers add the previous layer's "
             "attention scores (residual attention)",
             residual_attention=True),
    _variant("realformer_mean", "RealFormer, running mean", "RealFormer dividing the carried "
             "scores by the layer count (a running mean) before the softmax",
             aliases=("realformer_running_mean", "running_mean"),
             residual_attention=True, use_running_mean=True),
    _variant("pre_ln", "Pre-LN", "layer norm before each sublayer, no residual attention",
             aliases=("pre",),
             residual_attention=False, layer_norm_type="pre"),
    _variant("normformer", "NormFormer", "Pre-LN plus NormFormer's head scale and two extra "
             "layer norms, no residual attention",
             residual_attention=False, layer_norm_type="normformer"),
    _variant("normformer_residual_scale", "NormFormer + residual scale", "NormFormer with its "
             "optional learned scale on the residual branch",
             residual_attention=False, layer_norm_type="normformer", normformer_residual_scale=True),
    _variant("realformer_normformer", "RealFormer + NormFormer", "NormFormer blocks with "
             "residual attention",
             residual_attention=True, layer_norm_type="normformer"),
)})

# Old name -> name, for reading files written before the names were unified.
ALIASES = types.MappingProxyType({alias: v.name for v in VARIANTS.values() for alias in v.aliases})


def _choices():
    return ", ".join(VARIANTS)


def get_variant(name):
    """The `Variant` called `name`.

    Raises:
      UsageError: for an unknown name (the message lists the names).
    """
    try:
        return VARIANTS[name]
    except (KeyError, TypeError):
        raise UsageError(f"unknown variant {name!r}; choose from {_choices()}") from None


def canonical_name(name):
    """`name`, or the name of the variant an older version called `name` (e.g. "post"
    -> "bert"); UsageError for neither."""
    return get_variant(ALIASES.get(name, name)).name


def parse_names(text, allow_all=True):
    """Comma-separated variant names (or "all") -> list of names, in the order given.

    Raises:
      UsageError: for an unknown name or an empty list.
    """
    names = [v.strip() for v in str(text).split(",") if v.strip()]
    if allow_all and names == ["all"]:
        return list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise UsageError(f"unknown variant(s) {', '.join(unknown) or '(none given)'}; choose from "
                         f"{_choices()}" + (" or 'all'" if allow_all else ""))
    return names


def apply_variant(config, name):
    """A copy of `config` (a BertConfig, EtcConfig or any config dataclass with the
    `SWITCHES` fields; or a dict of config fields) computing variant `name`, its other
    fields unchanged."""
    settings = get_variant(name).settings
    if isinstance(config, dict):
        return {**config, **settings}
    missing = [f for f in settings if not hasattr(config, f)]
    if missing or not dataclasses.is_dataclass(config):
        raise UsageError(f"{type(config).__name__} has no variant switches ({', '.join(missing)}); "
                         "give a BertConfig or an EtcConfig")
    return dataclasses.replace(config, **settings)


def variant_config(name, **sizes):
    """The BertConfig of variant `name` with the other fields from `sizes` (vocab_size
    is required; the rest default as in BertConfig).

        variant_config("pre_ln", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64)
    """
    clash = sorted(set(sizes) & set(SWITCHES))
    if clash:
        raise UsageError(f"variant_config: {', '.join(clash)} is set by the variant; "
                         "choose another variant instead")
    return BertConfig(**sizes, **get_variant(name).settings)
