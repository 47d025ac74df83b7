"""The kernel table: one class per firmware kernel (kernels/base.py says
what each states).  KERNELS lists them all; lowering builds their records,
the stream and prefill passes, the code-flash estimate and the emitter ask
the records themselves."""
from .attention import Attention, Rope
from .base import BatchContext, Chunk, Kernel, PinCandidate, VerifyOutput, WeightRead
from .classifier import ArgmaxClassifier, StreamedArgmax, StreamedTopK, TopKClassifier
from .elementwise import Add, SiluMul, SiluMulPairsX16
from .embed import EmbedGGUF, EmbedQ4, StreamedEmbed
from .matvec import Matvec, MatvecGGUF, MatvecGGUFx4, MatvecQ4, MatvecQ4x4, StreamedMatvec
from .norm import RmsNorm, RmsNormX16
from .per_channel import FcS4PerChannel
from .quantize import QuantizeI8, QuantizeStaticS8, QuantizeX16

KERNELS = (EmbedQ4, EmbedGGUF, StreamedEmbed, RmsNorm, RmsNormX16, QuantizeI8, QuantizeX16, QuantizeStaticS8,
           MatvecQ4, MatvecQ4x4, MatvecGGUF, MatvecGGUFx4, StreamedMatvec, ArgmaxClassifier, TopKClassifier,
           StreamedArgmax, StreamedTopK, FcS4PerChannel, Rope, Attention, Add, SiluMul, SiluMulPairsX16)

__all__ = ["KERNELS", "Kernel", "BatchContext", "Chunk", "PinCandidate", "Matvec", "VerifyOutput", "WeightRead"] + [k.__name__ for k in KERNELS]
